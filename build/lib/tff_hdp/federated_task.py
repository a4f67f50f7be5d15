"""The one interface every task in `tasks/` implements, so any algorithm runs on any task.

A task has clients, a server test set and a Keras model builder; this module
turns them into the `tf.data` pipelines and `tff.learning` models the library
consumes. What stands behind the clients is a `ClientSource`: numpy arrays
held for the run (`ArraySource`), or a source that reads a client's examples
only when asked (a TFF `ClientData`, tasks/client_data.py), so a population
of a million clients costs the memory of the clients a round reads.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import hashlib
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp import metrics as metrics_lib

Arrays = tuple[np.ndarray, np.ndarray]


@dataclasses.dataclass(frozen=True)
class TaskOptions:
  """What the command line can say to any task loader.

  `data_dir` is where a real dataset's files are (None: the loader's default
  or an error saying what to put where); `num_clients` overrides a task's
  client count where the task allows it.
  """

  data_dir: str | None = None
  batch_size: int = 10
  seed: int = 0
  num_clients: int | None = None


def _check_finite(arrays: Arrays, where: str) -> None:
  for kind, a in zip(('features', 'labels'), arrays):
    a = np.asarray(a)
    if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
      raise ValueError(f'{where} has {np.size(a) - np.isfinite(a).sum()} '
                       f'non-finite (NaN or inf) {kind}; clean the data.')


def check_client(task_name: str, client_id: Hashable, split: str,
                 arrays: Arrays) -> Arrays:
  """`arrays` if finite, else a ValueError naming the task and client.

  A NaN or inf feature would make every update of its client non-finite,
  dropped by the aggregator: the run would train on nothing and still print
  an accuracy.
  """
  _check_finite(arrays, f'task {task_name!r}: client {client_id!r}\'s '
                f'{split} data')
  return arrays


class ClientSource(abc.ABC):
  """Where a task's clients' examples come from.

  `client_ids` is the population in its fixed order (sampling and group
  assignment depend on it). `evaluation_clients` bounds how many clients'
  test sets a per-client metric reads (None: all, for sources held in
  memory); `description` says what the source is, and `notes` what the run
  should know of how it is read, for the run's output.
  """

  client_ids: Sequence[Hashable]
  evaluation_clients: int | None = None
  description: str = 'arrays in memory'
  notes: tuple[str, ...] = ()  # what a run says of the data before it trains

  @abc.abstractmethod
  def check(self, task_name: str) -> None:
    """Refuses data a run could not train on, naming the client; a source
    that reads clients lazily checks each one when it reads it instead."""

  @abc.abstractmethod
  def train(self, client_id: Hashable) -> Arrays:
    """The client's training `(x, y)`, in its stored order."""

  @abc.abstractmethod
  def test(self, client_id: Hashable) -> Arrays:
    """The client's test `(x, y)`, possibly empty."""

  @abc.abstractmethod
  def update_digest(self, digest) -> None:
    """Adds what identifies the clients' data to a hashlib object."""

  # Whether TFF workers read the clients' training examples from storage
  # themselves, so a round carries no examples; not for arrays in memory.
  # A source that says so also has `stored_key(client_id) -> str` (what
  # names the client's training examples in that storage, e.g. its id in a
  # SqlClientData file) and `read_stored(key)` (in a graph, wherever it
  # runs: the training `(x, y)`, in stored order, of the client whose key is
  # the string tensor `key`).
  workers_read: bool = False


@dataclasses.dataclass(frozen=True)
class StoredExamples:
  """A client's training examples as a TFF worker reads them: `read(key)`
  (a source's `read_stored`, see `ClientSource.workers_read`) gives them in
  stored order, `order` is the permutation to train in. `read_on_worker`
  turns clients into a dataset."""

  key: str
  order: np.ndarray
  read: Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


def read_on_worker(clients: Sequence[StoredExamples],
                   batch_size: int | None = None) -> tf.data.Dataset:
  """One element per client: its `(x, y)` in its order, read by the graph
  where the dataset runs; with `batch_size`, the clients' examples in
  batches of that size instead. The graph holds the clients' keys and
  orders and one reading pipeline, not their examples: its size does not
  grow with the examples'. All of `clients` share the first one's `read`."""
  keys = tf.constant([c.key for c in clients])
  values = tf.constant(np.concatenate([c.order for c in clients]), tf.int64)
  lengths = tf.constant([len(c.order) for c in clients], tf.int64)
  build, batched = _dataset_builders(clients[0].read)
  if batch_size is None:
    return build(keys, values, lengths)
  return batched(keys, values, lengths, tf.constant(batch_size, tf.int64))


@functools.lru_cache(maxsize=8)
def _dataset_builders(read):
  """`read_on_worker`'s pipelines for one `read`, without and with batches,
  each traced once: built eagerly, its map function was traced anew for
  every client (~50 ms each)."""
  spec = [tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int64),
          tf.TensorSpec([None], tf.int64)]

  def ordered(keys, values, lengths):
    orders = tf.RaggedTensor.from_row_lengths(values, lengths)
    return tf.data.Dataset.from_tensor_slices((keys, orders)).map(
        lambda key, order: tuple(tf.gather(a, order) for a in read(key)))

  return (tf.function(ordered, input_signature=spec),
          tf.function(lambda keys, values, lengths, batch_size: ordered(
              keys, values, lengths).unbatch().batch(batch_size),
                      input_signature=spec + [tf.TensorSpec([], tf.int64)]))


class ArraySource(ClientSource):
  """Clients' arrays held in memory: `train[c]` and `test[c]` are `(x, y)`."""

  def __init__(self, train: Mapping[Hashable, Arrays],
               test: Mapping[Hashable, Arrays]):
    self.train_arrays, self.test_arrays = train, test
    self.client_ids = list(train)

  def check(self, task_name: str) -> None:
    empty = [c for c, (x, _) in self.train_arrays.items() if len(x) == 0]
    if empty:
      raise ValueError(
          f'task {task_name!r}: {len(empty)} clients have no training '
          f'examples, e.g. {empty[:3]}; drop them when building the task.')
    for split, data in (('training', self.train_arrays),
                        ('test', self.test_arrays)):
      for c, arrays in data.items():
        check_client(task_name, c, split, arrays)

  def train(self, client_id: Hashable) -> Arrays:
    return self.train_arrays[client_id]

  def test(self, client_id: Hashable) -> Arrays:
    return self.test_arrays[client_id]

  def update_digest(self, digest) -> None:
    for c in self.train_arrays:
      digest.update(repr(c).encode())
      add_arrays(digest, self.train_arrays[c])
      add_arrays(digest, self.test_arrays.get(c, ()))


def seeded_subset(client_ids: Sequence[Hashable], k: int) -> list[Hashable]:
  """At most `k` of `client_ids`, in their order, the same at every call."""
  if len(client_ids) <= k:
    return list(client_ids)
  chosen = np.sort(np.random.default_rng(0).choice(len(client_ids), k,
                                                   replace=False))
  return [client_ids[i] for i in chosen]


def add_arrays(digest, arrays) -> None:
  """Adds each array's dtype, shape and bytes to a hashlib object."""
  for a in arrays:
    a = np.ascontiguousarray(a)
    digest.update(f'{a.dtype.str}{a.shape}'.encode())
    digest.update(a.data)


@dataclasses.dataclass
class FederatedTask:
  """Clients' train/test data, a server test set and a model.

  The clients are `client_train[c]` and `client_test[c]`, `(x, y)` arrays,
  or, with both None, a `clients` source that reads them on demand; the
  algorithms read them only through the accessors below. `keras_model_fn`
  builds a fresh, uncompiled Keras model; `metric` names what the tables
  report: 'accuracy' (argmax of the outputs against integer labels),
  'sign_accuracy' (sign of one output against labels in {-1, 1}) or 'mse'
  (squared error of one output); one-output tasks keep labels as `[n, 1]`
  columns. `dropped_clients` counts the clients the loader dropped for lack
  of examples.
  """

  name: str
  client_train: Mapping[Hashable, Arrays] | None
  client_test: Mapping[Hashable, Arrays] | None
  server_test: Arrays
  keras_model_fn: Callable[[], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  batch_size: int
  metric: str = 'accuracy'
  # Clients allowed to opt out (e.g. skewed non-IID MNIST: the digit-7
  # holders); None means any client.
  opt_out_pool: Sequence[Hashable] | None = None
  dropped_clients: int = 0
  clients: ClientSource | None = None

  def __post_init__(self):
    if self.metric not in metrics_lib.METRICS:
      raise ValueError(f'task {self.name!r}: unknown metric {self.metric!r}; '
                       f'choose from {tuple(metrics_lib.METRICS)}.')
    # Arrays win over an ArraySource: `dataclasses.replace(task, ...)` copies
    # both, and may have replaced the arrays.
    arrays = self.client_train is not None
    source = self.clients is not None and not isinstance(self.clients,
                                                         ArraySource)
    if arrays == source:
      raise ValueError(f'task {self.name!r}: give client arrays or a client '
                       'source, exactly one of them.')
    if arrays:
      self.clients = ArraySource(self.client_train, self.client_test)
    if self.batch_size < 1:
      raise ValueError(f'batch size must be >= 1, got {self.batch_size}.')
    self.clients.check(self.name)
    _check_finite(self.server_test, f'task {self.name!r}: the server test set')

  @functools.cached_property
  def data_digest(self) -> str:
    """SHA-256 of the clients (in order), their data, the server test set
    and the opt-out pool: a resumed run must read the data it started on."""
    digest = hashlib.sha256()
    self.clients.update_digest(digest)
    add_arrays(digest, self.server_test)
    digest.update(repr(self.opt_out_pool).encode())
    return digest.hexdigest()

  @functools.cached_property
  def num_trainable_parameters(self) -> int:
    """d, the model's trainable parameters (what canaries' directions
    span)."""
    return sum(int(np.prod(w.shape))
               for w in self.keras_model_fn().trainable_weights)

  @property
  def metric_record(self) -> metrics_lib.Metric:
    return metrics_lib.METRICS[self.metric]

  @property
  def client_ids(self) -> list[Hashable]:
    return list(self.clients.client_ids)

  def train_arrays(self, client_id: Hashable) -> Arrays:
    """A client's training `(x, y)` in stored order."""
    return self.clients.train(client_id)

  def test_arrays(self, client_id: Hashable) -> Arrays:
    """A client's test `(x, y)`."""
    return self.clients.test(client_id)

  def num_train_examples(self, client_id: Hashable) -> int:
    return len(self.train_arrays(client_id)[0])

  def evaluation_clients(self, client_ids: Sequence[Hashable]
                         ) -> list[Hashable]:
    """Whose test sets per-client metrics score: all of `client_ids`, or for
    a source that bounds it, the same seeded subset at every evaluation."""
    k = self.clients.evaluation_clients
    return list(client_ids) if k is None else seeded_subset(client_ids, k)

  @property
  def input_spec(self):
    x, y = self.train_arrays(self.clients.client_ids[0])
    return (tf.TensorSpec([None] + list(x.shape[1:]), tf.float32),
            tf.TensorSpec([None] + list(y.shape[1:]), tf.as_dtype(y.dtype)))

  def train_order(self, client_id: Hashable, seed: int) -> np.ndarray:
    """The permutation of a client's training examples that `seed` gives."""
    return np.random.default_rng(seed).permutation(
        self.num_train_examples(client_id))

  def shuffled_train(self, client_id: Hashable, seed: int) -> Arrays:
    """A client's training examples in the order `seed` gives them."""
    x, y = self.train_arrays(client_id)
    order = self.train_order(client_id, seed)
    return x[order], y[order]

  def shuffled_examples(self, client_id: Hashable, seed: int
                        ) -> Arrays | StoredExamples:
    """What a TFF computation receives of a client's examples in `seed`'s
    order: `shuffled_train(client_id, seed)`, or, for a source the workers
    read (`ClientSource.workers_read`), their key and order, so a round
    carries no examples."""
    if not self.clients.workers_read:
      return self.shuffled_train(client_id, seed)
    return StoredExamples(self.clients.stored_key(client_id),
                          self.train_order(client_id, seed),
                          self.clients.read_stored)

  def train_dataset(self, client_id: Hashable, seed: int) -> tf.data.Dataset:
    """Batches of a client's training data, shuffled by `seed`
    (`shuffled_examples`)."""
    examples = self.shuffled_examples(client_id, seed)
    if isinstance(examples, StoredExamples):
      return read_on_worker([examples], self.batch_size)
    return tf.data.Dataset.from_tensor_slices(examples).batch(self.batch_size)

  def tff_model_fn(self) -> Callable[[], tff.learning.models.VariableModel]:
    spec = self.input_spec
    metrics = ([tf.keras.metrics.SparseCategoricalAccuracy()]
               if self.metric == 'accuracy' else [])

    def model_fn():
      return tff.learning.models.from_keras_model(
          self.keras_model_fn(), loss=self.loss_fn(), input_spec=spec,
          metrics=[type(m)() for m in metrics])

    return model_fn

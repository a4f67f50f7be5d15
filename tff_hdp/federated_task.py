"""The one interface every task in `tasks/` implements, so any algorithm runs on any task.

A task owns its clients' data as numpy arrays (small enough to hold in memory
on one machine), the server test set, and a Keras model builder; this module
turns them into the `tf.data` pipelines and `tff.learning` models the library
consumes.
"""

from __future__ import annotations

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


@dataclasses.dataclass
class FederatedTask:
  """Clients' train/test arrays, a server test set and a model.

  `client_train[c]` and `client_test[c]` are `(x, y)`; `keras_model_fn`
  builds a fresh, uncompiled Keras model; `metric` names what the tables
  report: 'accuracy' (argmax of the outputs against integer labels),
  'sign_accuracy' (sign of one output against labels in {-1, 1}) or 'mse'
  (squared error of one output); one-output tasks keep labels as `[n, 1]`
  columns. `dropped_clients` counts the clients the loader dropped for lack
  of examples.
  """

  name: str
  client_train: Mapping[Hashable, Arrays]
  client_test: Mapping[Hashable, Arrays]
  server_test: Arrays
  keras_model_fn: Callable[[], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  batch_size: int
  metric: str = 'accuracy'
  # Clients allowed to opt out (e.g. skewed non-IID MNIST: the digit-7
  # holders); None means any client.
  opt_out_pool: Sequence[Hashable] | None = None
  dropped_clients: int = 0

  def __post_init__(self):
    if self.metric not in metrics_lib.METRICS:
      raise ValueError(f'task {self.name!r}: unknown metric {self.metric!r}; '
                       f'choose from {tuple(metrics_lib.METRICS)}.')
    empty = [c for c, (x, _) in self.client_train.items() if len(x) == 0]
    if empty:
      raise ValueError(
          f'task {self.name!r}: {len(empty)} clients have no training '
          f'examples, e.g. {empty[:3]}; drop them when building the task.')
    if self.batch_size < 1:
      raise ValueError(f'batch size must be >= 1, got {self.batch_size}.')
    # A NaN or inf feature would make every update of its client non-finite,
    # dropped by the aggregator: the run would train on nothing and still
    # print an accuracy.
    for split, data in (('training', self.client_train),
                        ('test', self.client_test)):
      for c, arrays in data.items():
        _check_finite(arrays, f'task {self.name!r}: client {c!r}\'s {split} '
                      'data')
    _check_finite(self.server_test, f'task {self.name!r}: the server test set')

  @functools.cached_property
  def data_digest(self) -> str:
    """SHA-256 of the clients (in order), their arrays, the server test set
    and the opt-out pool: a resumed run must read the data it started on."""
    digest = hashlib.sha256()

    def add(arrays):
      for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f'{a.dtype.str}{a.shape}'.encode())
        digest.update(a.data)

    for c in self.client_train:
      digest.update(repr(c).encode())
      add(self.client_train[c])
      add(self.client_test.get(c, ()))
    add(self.server_test)
    digest.update(repr(self.opt_out_pool).encode())
    return digest.hexdigest()

  @property
  def metric_record(self) -> metrics_lib.Metric:
    return metrics_lib.METRICS[self.metric]

  @property
  def client_ids(self) -> list[Hashable]:
    return list(self.client_train)

  @property
  def input_spec(self):
    x, y = next(iter(self.client_train.values()))
    return (tf.TensorSpec([None] + list(x.shape[1:]), tf.float32),
            tf.TensorSpec([None] + list(y.shape[1:]), tf.as_dtype(y.dtype)))

  def train_order(self, client_id: Hashable, seed: int) -> np.ndarray:
    """The permutation of a client's training examples that `seed` gives."""
    return np.random.default_rng(seed).permutation(
        len(self.client_train[client_id][0]))

  def shuffled_train(self, client_id: Hashable, seed: int) -> Arrays:
    """A client's training examples in the order `seed` gives them."""
    x, y = self.client_train[client_id]
    order = self.train_order(client_id, seed)
    return x[order], y[order]

  def train_dataset(self, client_id: Hashable, seed: int) -> tf.data.Dataset:
    """Batches of a client's training data, shuffled by `seed`."""
    return tf.data.Dataset.from_tensor_slices(
        self.shuffled_train(client_id, seed)).batch(self.batch_size)

  def tff_model_fn(self) -> Callable[[], tff.learning.models.VariableModel]:
    spec = self.input_spec
    metrics = ([tf.keras.metrics.SparseCategoricalAccuracy()]
               if self.metric == 'accuracy' else [])

    def model_fn():
      return tff.learning.models.from_keras_model(
          self.keras_model_fn(), loss=self.loss_fn(), input_spec=spec,
          metrics=[type(m)() for m in metrics])

    return model_fn

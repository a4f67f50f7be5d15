"""Ditto personalization on the clients of FedHDP (SPEC.md §1).

Each participating client keeps a personal model and, on the same batches it
trains the global update on, takes one step per batch of
`theta_j <- theta_j - eta_p (grad f_j(theta_j) + lambda (theta_j - theta^t))`,
with lambda chosen by the client's privacy group (lambda_p, lambda_np).

The step is a TFF computation mapping (global model at SERVER, personal models
at CLIENTS, client data at CLIENTS) to new personal models at CLIENTS. It runs
beside the composed FedHDP `LearningProcess` rather than inside it: a learning
process returns nothing placed at CLIENTS, while personal models must persist
per client. In simulation they live in `PersonalModels`, a store keyed by
client id that the round reads and writes and that checkpoints save. Personal
models never enter the aggregate, so they cost no privacy.

`build_cohort_personalization` is the same step for cohorts (`tff_hdp.learning.cohort`):
one call takes the steps of K simulated clients in turn, their personal models
stacked `[K, ...]` per variable, on the cohort's padded examples.
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Callable, Hashable, Iterable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.learning import client_work
from tff_hdp.learning import cohort


def _ditto_step(model, trainable, anchor, lam, learning_rate, batch):
  """One personal step on `batch`: loss gradient plus the pull towards
  `anchor` (theta^t); `trainable` and `anchor` are flat lists."""
  with tf.GradientTape() as tape:
    output = model.forward_pass(batch, training=True)
  grads = tape.gradient(output.loss, trainable)
  for v, g, a in zip(trainable, grads, anchor):
    v.assign_sub(learning_rate * (g + lam * (v - a)))


def _group_lambda(one_hot, lambdas: np.ndarray):
  """The client's lambda; an all-zero row (cohort padding) gives 0."""
  return tf.reduce_sum(one_hot * tf.constant(lambdas, tf.float32))


def _keep_if_finite(updated, personal):
  """A personal model that went non-finite is not kept."""
  finite = clipping.all_finite(updated)
  return tf.nest.map_structure(lambda u, p: tf.where(finite, u, p), updated,
                               personal)


def _load_model(model, global_weights):
  """Sets the model's non-trainable variables to theta^t's; returns its flat
  trainable variables, which the caller sets to a personal model."""
  weights = tff.learning.models.ModelWeights.from_model(model)
  tf.nest.map_structure(lambda v, t: v.assign(t), weights.non_trainable,
                        global_weights.non_trainable)
  return tf.nest.flatten(weights.trainable)


def _build_personal_training(model_fn, epochs: int, lambdas: np.ndarray,
                             learning_rate: float):
  model = model_fn()

  @tf.function
  def train(global_weights, personal, data, group):
    trainable = _load_model(model, global_weights)
    for v, p in zip(trainable, tf.nest.flatten(personal)):
      v.assign(p)
    one_hot = group.reduce(tf.zeros([len(lambdas)], tf.float32),
                           lambda acc, g: acc + g)
    lam = _group_lambda(one_hot, lambdas)
    anchor = tf.nest.flatten(global_weights.trainable)

    def step(count, batch):
      _ditto_step(model, trainable, anchor, lam, learning_rate, batch)
      return count + 1

    data.repeat(epochs).reduce(tf.constant(0, tf.int64), step)
    updated = tf.nest.pack_sequence_as(
        personal, [tf.identity(v) for v in trainable])
    return _keep_if_finite(updated, personal)

  return train


def _build_cohort_personal_training(model_fn, epochs: int, lambdas: np.ndarray,
                                    learning_rate: float, batch_size: int):
  """The function that takes every simulated client's steps in turn.

  It takes the cohort's tensors rather than its dataset, with K and n_max
  unknown, and is traced here, once: cohorts of any size share the trace,
  and threads that call it only run it.
  """
  model = model_fn()
  weights = tf.nest.map_structure(
      lambda v: tf.TensorSpec(v.shape, v.dtype),
      tff.learning.models.ModelWeights.from_model(model))

  def per_client(spec):
    """`spec` with a leading [K] (data: [K, n_max] + example shape)."""
    return tf.TensorSpec([None] + spec.shape.as_list(), spec.dtype)

  signature = (weights, [per_client(s) for s in weights.trainable],
               tf.nest.map_structure(per_client, model.input_spec),
               tf.TensorSpec([None], tf.int32),
               tf.TensorSpec([None, len(lambdas)], tf.float32))

  @tf.function(input_signature=signature)
  def train(global_weights, personal, data, counts, groups):
    trainable = _load_model(model, global_weights)
    stacked = tf.nest.flatten(personal)
    anchor = tf.nest.flatten(global_weights.trainable)
    num_clients = tf.shape(counts)[0]
    out = [tf.TensorArray(v.dtype, size=num_clients, element_shape=v.shape)
           for v in trainable]
    for k in tf.range(num_clients):
      start_k = [p[k] for p in stacked]
      for v, p in zip(trainable, start_k):
        v.assign(p)
      lam = _group_lambda(groups[k], lambdas)

      def step(count, batch):
        _ditto_step(model, trainable, anchor, lam, learning_rate, batch)  # pylint: disable=cell-var-from-loop
        return count + 1

      cohort.train_slot(data, k, counts[k], epochs, batch_size, step,
                        tf.constant(0))
      kept = _keep_if_finite([tf.identity(v) for v in trainable], start_k)
      out = [ta.write(k, u) for ta, u in zip(out, kept)]
    return tf.nest.pack_sequence_as(personal, [ta.stack() for ta in out])

  return train.get_concrete_function()


class CohortPersonalization:
  """Ditto's step on cohorts: `step(global_weights, personal, data)` with
  personal models stacked `[K, ...]` per variable (`stack_personal`) and
  `cohort.pack_cohort` data, one entry per cohort; returns the new stacked
  personal models.

  Personal models never leave their clients, so in simulation each cohort
  runs its clients' tf.function directly, as the clients themselves would. A
  TFF computation around it would copy every stacked personal model into and
  out of TFF's executor each round: for 100 clients of the 784-200-10 network
  that copying took 1.8 s of a 2.2 s step (the training itself 0.4 s).

  Cohorts are independent, so they run side by side, one thread per core
  (each thread its own traced function and model, built on first need), as
  TFF's worker runs the cohorts of a round; each cohort's result is what it
  would be alone.
  """

  def __init__(self, build_train: Callable[[], Callable],
               threads: int | None = None) -> None:
    """Initializes `CohortPersonalization`.

    Args:
      build_train: builds and traces a cohort function,
        `train(global_weights, personal, data, counts, groups)` -> the new
        stacked personal models, with a model of its own.
      threads: most cohorts run at once (None: one per CPU core).
    """
    self._build_train = build_train
    self._threads = threads or os.cpu_count() or 1
    self._trains = []

  def __call__(self, global_weights, personal, data):
    weights = tf.nest.map_structure(tf.convert_to_tensor, global_weights)
    jobs = list(zip(personal, data))
    threads = min(self._threads, len(jobs))
    while len(self._trains) < threads:
      self._trains.append(self._build_train())

    def run(train, models, cohort_data):
      element = cohort_data.get_single_element()
      return train(weights, [tf.convert_to_tensor(m) for m in models],
                   element[cohort.DATA_KEY], element[cohort.COUNT_KEY],
                   element[cohort.GROUP_KEY])

    def run_share(thread):
      # Thread t runs cohorts t, t + threads, ... with its own function.
      return [run(self._trains[thread], *jobs[i])
              for i in range(thread, len(jobs), threads)]

    if threads <= 1:
      return run_share(0) if jobs else []
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
      shares = list(pool.map(run_share, range(threads)))
    return [shares[i % threads][i // threads] for i in range(len(jobs))]


def _check(lambdas, learning_rate) -> np.ndarray:
  if any(l < 0 for l in lambdas):
    raise ValueError(f'Ditto lambdas must be >= 0, got {list(lambdas)}.')
  if not learning_rate > 0:
    raise ValueError(
        f'personal learning rate must be > 0, got {learning_rate}.')
  return np.asarray(lambdas, np.float32)


def build_personalization(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    lambdas: Sequence[float],
    learning_rate: float,
    epochs: int = 1) -> tff.Computation:
  """The Ditto step as a federated computation: broadcast theta^t, map the
  clients' (personal model, data) to new personal models.

  `lambdas[j]` is the regularization weight of training group j (the client's
  group vector selects it); `learning_rate` is eta_p.

  Args:
    model_fn: builds the TFF model.
    lambdas: lambda per privacy group, each >= 0.
    learning_rate: eta_p, the personal step size.
    epochs: passes over the client's batches per call.

  Returns:
    A `tff.Computation` mapping (global weights at SERVER, personal models at
    CLIENTS, client data at CLIENTS, as `client_work.make_client_data` packs
    it) to the new personal models at CLIENTS.

  Raises:
    ValueError: if a lambda is negative or `learning_rate` is not > 0.
  """
  lambdas = _check(lambdas, learning_rate)
  with tf.Graph().as_default():
    model = model_fn()
  weights_type = tff.learning.models.weights_type_from_model(model)
  personal_type = weights_type.trainable
  data_type = client_work.client_data_type(model.input_spec, len(lambdas))

  @tff.tensorflow.computation(weights_type, personal_type, data_type)
  def personal_update(global_weights, personal, client_data):
    train = _build_personal_training(model_fn, epochs, lambdas, learning_rate)
    return train(global_weights, personal, client_data[client_work.DATA_KEY],
                 client_data[client_work.GROUP_KEY])

  @tff.federated_computation(
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(personal_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def personalize(global_weights, personal, client_data):
    return tff.federated_map(
        personal_update,
        (tff.federated_broadcast(global_weights), personal, client_data))

  return personalize


def build_cohort_personalization(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    lambdas: Sequence[float],
    learning_rate: float,
    batch_size: int,
    epochs: int = 1,
    threads: int | None = None) -> CohortPersonalization:
  """The Ditto step on cohorts (`CohortPersonalization`).

  Every simulated client takes exactly the steps of `build_personalization`
  on the same batches (`batch_size` examples, its own order, `epochs` times);
  padding slots (no examples, zero group row) come back unchanged.

  Args:
    model_fn: builds the TFF model.
    lambdas: lambda per privacy group, each >= 0.
    learning_rate: eta_p, the personal step size.
    batch_size: examples per personal step.
    epochs: passes over each simulated client's examples per call.
    threads: most cohorts stepped at once (None: one per CPU core).

  Returns:
    The `CohortPersonalization` step.

  Raises:
    ValueError: if a lambda is negative, `learning_rate` is not > 0 or
      `batch_size` is less than 1.
  """
  lambdas = _check(lambdas, learning_rate)
  if batch_size < 1:
    raise ValueError(f'batch size must be >= 1, got {batch_size}.')
  return CohortPersonalization(lambda: _build_cohort_personal_training(
      model_fn, epochs, lambdas, learning_rate, batch_size), threads)


def stack_personal(models: Sequence[Sequence[np.ndarray]],
                   sizes: Sequence[int]) -> list[list[np.ndarray]]:
  """Clients' personal models as cohorts of `sizes` (`cohort.split_sizes`),
  each variable stacked `[K, ...]`."""
  out, start = [], 0
  for k in sizes:
    out.append([np.stack(v) for v in zip(*models[start:start + k])])
    start += k
  return out


def unstack_personal(stacked: Iterable[Sequence[np.ndarray]]
                     ) -> list[list[np.ndarray]]:
  """The per-client personal models of `stack_personal`-shaped cohorts."""
  return [list(m) for cohort_models in stacked
          for m in zip(*[np.asarray(v) for v in cohort_models])]


class PersonalModels:
  """Personal models keyed by client id; a client without one uses the
  global model (Ditto starts it there at its first participation)."""

  def __init__(self) -> None:
    """Initializes an empty store."""
    self._models: dict[Hashable, list[np.ndarray]] = {}

  def __len__(self) -> int:
    return len(self._models)

  def __contains__(self, client_id: Hashable) -> bool:
    return client_id in self._models

  def get(self, client_id: Hashable,
          global_trainable: Sequence[np.ndarray]) -> list[np.ndarray]:
    return self._models.get(client_id,
                            [np.asarray(w) for w in global_trainable])

  def update(self, client_ids: Iterable[Hashable], models) -> None:
    for c, m in zip(client_ids, models):
      self._models[c] = [np.asarray(w) for w in m]

  def save(self, path: str) -> None:
    """Atomic write: a crash mid-save leaves the previous file intact."""
    ids = list(self._models)
    arrays = {'client_ids': np.array([repr(c) for c in ids])}
    for i, c in enumerate(ids):
      for j, w in enumerate(self._models[c]):
        arrays[f'{i}/{j}'] = w
    tmp = f'{path}.tmp.npz'
    np.savez(tmp, **arrays)
    os.replace(tmp, path)

  @classmethod
  def load(cls, path: str, client_ids: Iterable[Hashable]) -> PersonalModels:
    by_repr = {repr(c): c for c in client_ids}
    store = cls()
    with np.load(path) as f:
      saved = list(f['client_ids'])
      unknown = [r for r in saved if r not in by_repr]
      if unknown:
        raise ValueError(
            f'{path} holds personal models of clients this task does not '
            f'have, e.g. {unknown[:3]}.')
      layers = {}
      for key in f.files:
        if key != 'client_ids':
          i, j = map(int, key.split('/'))
          layers.setdefault(i, {})[j] = f[key]
      for i, r in enumerate(saved):
        store._models[by_repr[r]] = [layers[i][j]
                                     for j in sorted(layers.get(i, {}))]
    return store

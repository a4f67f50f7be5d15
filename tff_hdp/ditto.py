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
"""

from __future__ import annotations

import os
from typing import Callable, Hashable, Iterable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp import client_work


def _build_personal_training(model_fn, epochs: int, lambdas: np.ndarray,
                             learning_rate: float):
  model = model_fn()

  @tf.function
  def train(global_weights, personal, data, group):
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), weights.non_trainable,
                          global_weights.non_trainable)
    tf.nest.map_structure(lambda v, t: v.assign(t), weights.trainable,
                          personal)
    one_hot = group.reduce(tf.zeros([len(lambdas)], tf.float32),
                           lambda acc, g: acc + g)
    lam = tf.reduce_sum(one_hot * tf.constant(lambdas, tf.float32))

    def step(count, batch):
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      grads = tape.gradient(output.loss, weights.trainable)
      for v, g, anchor in zip(tf.nest.flatten(weights.trainable),
                              tf.nest.flatten(grads),
                              tf.nest.flatten(global_weights.trainable)):
        v.assign_sub(learning_rate * (g + lam * (v - anchor)))
      return count + 1

    data.repeat(epochs).reduce(tf.constant(0, tf.int64), step)
    updated = tf.nest.map_structure(tf.identity, weights.trainable)
    # A personal model that went non-finite is not kept.
    finite = client_work.all_finite(updated)
    return tf.nest.map_structure(lambda u, p: tf.where(finite, u, p), updated,
                                 personal)

  return train


def build_personalization(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    lambdas: Sequence[float],
    learning_rate: float,
    epochs: int = 1) -> tff.Computation:
  """The Ditto step as a federated computation.

  `lambdas[j]` is the regularization weight of training group j (the client's
  group vector selects it); `learning_rate` is eta_p.
  """
  if any(l < 0 for l in lambdas):
    raise ValueError(f'Ditto lambdas must be >= 0, got {list(lambdas)}.')
  if not learning_rate > 0:
    raise ValueError(
        f'personal learning rate must be > 0, got {learning_rate}.')
  lambdas = np.asarray(lambdas, np.float32)
  with tf.Graph().as_default():
    model = model_fn()
  weights_type = tff.learning.models.weights_type_from_model(model)
  data_type = client_work.client_data_type(model.input_spec, len(lambdas))

  @tff.tensorflow.computation(weights_type, weights_type.trainable, data_type)
  def personal_update(global_weights, personal, client_data):
    train = _build_personal_training(model_fn, epochs, lambdas, learning_rate)
    return train(global_weights, personal, client_data[client_work.DATA_KEY],
                 client_data[client_work.GROUP_KEY])

  @tff.federated_computation(
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(weights_type.trainable, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def personalize(global_weights, personal, client_data):
    return tff.federated_map(
        personal_update,
        (tff.federated_broadcast(global_weights), personal, client_data))

  return personalize


class PersonalModels:
  """Personal models keyed by client id; a client without one uses the
  global model (Ditto starts it there at its first participation)."""

  def __init__(self):
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

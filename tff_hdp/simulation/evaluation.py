"""The papers' metrics for a global model (SPEC.md §1, FedHDP Table 1).

Evaluation is read-only post-processing of the released model, so it runs in
plain Keras outside TFF: one forward pass over all clients' test sets at once.
Accuracies are in percent; "variance" is the variance across clients of their
local accuracies, as the papers print it in parentheses. A task whose clients
are read on demand scores the per-client metrics on a fixed seeded subset of
clients (`FederatedTask.evaluation_clients`), so an evaluation of a million
clients reads a bounded number of them.
"""

from __future__ import annotations

import collections
from typing import Collection, Hashable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp import metrics as metrics_lib
from tff_hdp.privacy import release_policy

from tff_hdp.federated_task import FederatedTask


def _predict(model: tf.keras.Model, x: np.ndarray) -> np.ndarray:
  return model(x, training=False).numpy()


def client_scores(task: FederatedTask, model: tf.keras.Model,
                  client_ids: Sequence[Hashable]) -> dict[Hashable, float]:
  """Each client's mean score on its own test set (clients without test
  examples have none)."""
  tests = {c: task.test_arrays(c) for c in client_ids}
  client_ids = [c for c in client_ids if len(tests[c][1])]
  if not client_ids:
    return {}
  xs, ys = zip(*(tests[c] for c in client_ids))
  scores = task.metric_record.score(_predict(model, np.concatenate(xs)),
                                    np.concatenate(ys))
  bounds = np.cumsum([0] + [len(y) for y in ys])
  return {c: float(scores[bounds[i]:bounds[i + 1]].mean())
          for i, c in enumerate(client_ids)}


# Personal models stacked per call of the batched predictor, at most this many
# bytes of weights at once: small chunks stay in cache (2,000 clients of the
# 784-200-10 network: 1.4 s in 16 MB chunks, 2.5 s in 256 MB ones).
_STACK_BYTES = 16 * 2**20


def _build_own_model_predictor(model: tf.keras.Model, x_spec: tf.TensorSpec):
  """A graph that, for each row i, loads row i of the stacked weights into
  `model` and predicts `x[bounds[i]:bounds[i + 1]]`: one call for many
  clients' own models, with no Python step per client. Traced once."""
  variables = model.trainable_weights + model.non_trainable_weights

  @tf.function(input_signature=[
      [tf.TensorSpec([None] + v.shape.as_list(), v.dtype) for v in variables],
      x_spec, tf.TensorSpec([None], tf.int64)])
  def predict(stacked, x, bounds):
    n = tf.shape(bounds)[0] - 1
    out = tf.TensorArray(tf.float32, size=n, infer_shape=False)
    for i in tf.range(n):
      for variable, rows in zip(variables, stacked):
        variable.assign(rows[i])
      out = out.write(i, tf.cast(
          model(x[bounds[i]:bounds[i + 1]], training=False), tf.float32))
    return out.concat()

  return predict


def own_model_scores(task: FederatedTask, model: tf.keras.Model,
                     weights_of: Mapping[Hashable, Sequence[np.ndarray]]
                     ) -> dict[Hashable, float]:
  """Each client's mean score on its own test set with its own model
  (clients without test examples have none).

  `weights_of[c]` is client c's trainable then non-trainable weights (in
  `model`'s order). Clients are scored in chunks of stacked weights by one
  graph (`_build_own_model_predictor`); `model`'s weights are overwritten.
  """
  clients = list(weights_of)
  if not clients:
    return {}
  x = task.test_arrays(clients[0])[0]
  predict = _build_own_model_predictor(
      model, tf.TensorSpec([None] + list(x.shape[1:]), x.dtype))
  model_bytes = sum(np.asarray(w).nbytes for w in weights_of[clients[0]])
  chunk = max(1, _STACK_BYTES // max(model_bytes, 1))
  out = {}
  for start in range(0, len(clients), chunk):
    part = clients[start:start + chunk]
    xs, ys = zip(*(task.test_arrays(c) for c in part))
    bounds = np.cumsum([0] + [len(y) for y in ys], dtype=np.int64)
    stacked = [np.stack(w) for w in zip(*(weights_of[c] for c in part))]
    outputs = predict(stacked, np.concatenate(xs), bounds).numpy()
    scores = task.metric_record.score(outputs, np.concatenate(ys))
    out.update({c: float(scores[bounds[i]:bounds[i + 1]].mean())
                for i, c in enumerate(part) if bounds[i + 1] > bounds[i]})
  return out


def keras_model_with(task: FederatedTask,
                     weights: tff.learning.models.ModelWeights
                     ) -> tf.keras.Model:
  model = task.keras_model_fn()
  weights.assign_weights_to(model)
  return model


def _scored(task: FederatedTask, private_clients: Mapping[Hashable, bool]
            ) -> dict[Hashable, bool]:
  """`private_clients` restricted to the clients the task has scored."""
  return {c: private_clients[c]
          for c in task.evaluation_clients(list(private_clients))}


def _group_means(per_client: Mapping[Hashable, float],
                 private_clients: Mapping[Hashable, bool], level: str
                 ) -> collections.OrderedDict:
  """acc_<level>_p / _np with their variances across clients, and delta."""
  metrics = collections.OrderedDict()
  for label, flag in (('p', True), ('np', False)):
    values = np.array([s for c, s in per_client.items()
                       if private_clients[c] == flag])
    metrics[f'acc_{level}_{label}'] = (float(values.mean()) if len(values)
                                       else None)
    metrics[f'var_{level}_{label}'] = (float(values.var()) if len(values)
                                       else None)
  p, n = metrics[f'acc_{level}_p'], metrics[f'acc_{level}_np']
  metrics[f'delta_{level}'] = n - p if p is not None and n is not None else None
  return metrics


def personalized_metrics(task: FederatedTask,
                         weights: tff.learning.models.ModelWeights,
                         personal_models,
                         private_clients: Mapping[Hashable, bool],
                         levels: Mapping[Hashable, str] | None = None
                         ) -> collections.OrderedDict:
  """Acc_l,p, Acc_l,np (variance across clients) and Delta_l; with
  `levels` (each private client's level name), also each level's mean
  (`release_policy.LEVEL_PERSONAL_PREFIX` + name) and the worst level's
  (`release_policy.WORST_LEVEL_PERSONAL`; the task's metric says which is
  worst).

  Each client is scored with its personal model; a client that never took
  part has none yet and is scored with the global model, where Ditto would
  start it.
  """
  private_clients = _scored(task, private_clients)
  clients = list(private_clients)
  without = [c for c in clients if c not in personal_models]
  model = keras_model_with(task, weights)
  per_client = client_scores(task, model, without)
  non_trainable = list(weights.non_trainable)
  per_client.update(own_model_scores(task, model, {
      c: list(personal_models.get(c, weights.trainable)) + non_trainable
      for c in clients if c in personal_models}))
  metrics = _group_means(per_client, private_clients, 'l')
  if levels is not None:
    metrics.update(_level_means(task, per_client, levels))
  return metrics


def _level_means(task: FederatedTask, per_client: Mapping[Hashable, float],
                 levels: Mapping[Hashable, str]) -> collections.OrderedDict:
  """Each level's mean score over its scored clients, and the worst."""
  metrics = collections.OrderedDict()
  for name in dict.fromkeys(levels.values()):
    values = [s for c, s in per_client.items() if levels.get(c) == name]
    metrics[release_policy.LEVEL_PERSONAL_PREFIX + name] = (
        float(np.mean(values)) if values else None)
  scored = [v for v in metrics.values() if v is not None]
  worst = None
  for v in scored:
    if worst is None or task.metric_record.better(worst, v):
      worst = v
  metrics[release_policy.WORST_LEVEL_PERSONAL] = worst
  return metrics


def scores_on_labels(scores: np.ndarray, y: np.ndarray,
                     label_sets: Mapping[str, Collection[int]]
                     ) -> dict[str, float | None]:
  """Each set's mean of the per-example `scores` over the examples whose
  label `y` is in it (None: no such example), one mask per set: a test set
  restricted to a group's labels, each label as often as the set holds
  it."""
  y = np.asarray(y).reshape(len(scores))
  out = {}
  for name, labels in label_sets.items():
    held = np.isin(y, np.fromiter(labels, dtype=np.int64))
    out[name] = float(scores[held].mean()) if held.any() else None
  return out


def _group_label_metrics(scores: np.ndarray, y: np.ndarray,
                         group_labels: Mapping[str, Collection[int]]
                         ) -> collections.OrderedDict:
  """The worst (lowest) group's accuracy and each group's on the test
  examples of its labels (`metrics.WORST_GROUP_COLUMN`, `GROUP_COLUMN`)."""
  by_group = scores_on_labels(scores, y, group_labels)
  scored = [v for v in by_group.values() if v is not None]
  metrics = collections.OrderedDict()
  metrics[metrics_lib.WORST_GROUP_COLUMN] = min(scored) if scored else None
  for group, value in by_group.items():
    metrics[metrics_lib.GROUP_COLUMN.format(group=group)] = value
  return metrics


def global_model_metrics(task: FederatedTask,
                         weights: tff.learning.models.ModelWeights,
                         private_clients: Mapping[Hashable, bool],
                         group_labels: Mapping[str, Collection[int]] | None
                         = None) -> collections.OrderedDict:
  """Acc_g, Acc_g,p, Acc_g,np (with variance across clients) and Delta_g;
  with `group_labels` ({privacy group: its public labels}), each group's
  Acc_g on the server's test examples of its labels and the worst group's
  (`_group_label_metrics`).

  `private_clients[c]` says whether client c chose a private level; it is the
  clients' own choice, not the algorithm's grouping, so DP-FedAvg and FedHDP
  are scored on the same two sets of clients.
  """
  model = keras_model_with(task, weights)
  x, y = task.server_test
  metrics = collections.OrderedDict()
  scores = task.metric_record.score(_predict(model, x), y)
  metrics['acc_g'] = float(scores.mean())
  if group_labels:
    metrics.update(_group_label_metrics(scores, y, group_labels))
  private_clients = _scored(task, private_clients)
  per_client = client_scores(task, model, list(private_clients))
  metrics.update(_group_means(per_client, private_clients, 'g'))
  return metrics

"""Scoring many clients' own models at once (`evaluation.own_model_scores`)
against loading each client's weights into Keras and predicting in turn, and
each privacy group's accuracy on the test examples of its labels against a
hand count."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.federated_task import FederatedTask
from tff_hdp.simulation import evaluation

pytestmark = pytest.mark.tf


def _model():
  # Batch normalization gives the model non-trainable weights too.
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(6,)),
      tf.keras.layers.Dense(5, activation='relu'),
      tf.keras.layers.BatchNormalization(),
      tf.keras.layers.Dense(3),
  ])


def _task(sizes, seed=0):
  rng = np.random.default_rng(seed)
  data = {f'c{i}': (rng.normal(size=(m, 6)).astype(np.float32),
                    rng.integers(0, 3, m).astype(np.int32))
          for i, m in enumerate(sizes)}
  train = {c: (x[:1], y[:1]) if len(y) else data['c0'] for c, (x, y) in
           data.items()}
  return FederatedTask(name='t', client_train=train, client_test=data,
                       server_test=data['c0'], keras_model_fn=_model,
                       loss_fn=None, batch_size=4)


def _own_weights(model, clients, seed=1):
  rng = np.random.default_rng(seed)
  return {c: [w + rng.normal(0, 0.5, w.shape).astype(np.float32)
              for w in model.trainable_weights + model.non_trainable_weights]
          for c in clients}


def _one_at_a_time(task, weights_of):
  model = task.keras_model_fn()
  out = {}
  for c, weights in weights_of.items():
    variables = model.trainable_weights + model.non_trainable_weights
    for v, w in zip(variables, weights):
      v.assign(w)
    x, y = task.client_test[c]
    logits = model(x, training=False).numpy()
    out[c] = (float(np.mean(np.argmax(logits, -1) == y) * 100) if len(y)
              else float('nan'))
  return out


@pytest.mark.parametrize('stack_bytes', [1, 2_000, 10**9])
def test_own_model_scores_equal_scoring_each_client_in_turn(
    monkeypatch, stack_bytes):
  # 1 byte: one client per chunk; 2,000: a few per chunk; 1e9: one chunk.
  monkeypatch.setattr(evaluation, '_STACK_BYTES', stack_bytes)
  task = _task([7, 1, 12, 3, 30, 5, 9])
  weights_of = _own_weights(task.keras_model_fn(), task.client_ids)
  got = evaluation.own_model_scores(task, task.keras_model_fn(), weights_of)
  want = _one_at_a_time(task, weights_of)
  assert list(got) == list(want)
  for c in want:
    assert got[c] == pytest.approx(want[c], abs=1e-9), c
  # The clients' models differ, so their scores do too (not one model's).
  same = evaluation.client_scores(task, task.keras_model_fn(), task.client_ids)
  assert any(abs(same[c] - got[c]) > 1 for c in got)


def test_a_client_without_test_examples_has_no_score_and_none_is_empty():
  """A client with no test examples is left out of the per-client metrics
  (a NaN score made its whole group's mean NaN), with its own model or the
  global one."""
  task = _task([4, 0, 3])
  weights_of = _own_weights(task.keras_model_fn(), task.client_ids)
  got = evaluation.own_model_scores(task, task.keras_model_fn(), weights_of)
  assert list(got) == ['c0', 'c2'] and not np.isnan(got['c0'])
  assert got['c2'] == pytest.approx(_one_at_a_time(task, weights_of)['c2'])
  assert evaluation.own_model_scores(task, task.keras_model_fn(), {}) == {}
  assert list(evaluation.client_scores(task, task.keras_model_fn(),
                                       task.client_ids)) == ['c0', 'c2']


def _identity_task():
  """A 3-class linear model with the identity as its kernel, so that it
  predicts the largest input; six server test examples predicted
  0 1 2 0 1 2 with labels 0 1 1 0 2 2 (right, right, wrong, right, wrong,
  right)."""
  def model_fn():
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(3,)),
        tf.keras.layers.Dense(3, use_bias=False)])
  x = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]
  y = np.array([0, 1, 1, 0, 2, 2], dtype=np.int32)
  data = {'c0': (x, y)}
  task = FederatedTask(name='t', client_train=data, client_test=data,
                       server_test=(x, y), keras_model_fn=model_fn,
                       loss_fn=None, batch_size=4)
  weights = tff.learning.models.ModelWeights(
      trainable=[np.eye(3, dtype=np.float32)], non_trainable=[])
  return task, weights


def test_each_group_is_scored_on_the_test_examples_of_its_labels():
  """Against a hand count: labels {0} are examples 0 and 3, both right
  (100%); {1, 2} are examples 1, 2, 4 and 5, two right (50%); {2} are 4
  and 5, one right (50%); no test example has label 7 (no score)."""
  task, weights = _identity_task()
  metrics = evaluation.global_model_metrics(
      task, weights, {'c0': False},
      {'strict': {0}, 'loose': {1, 2}, 'two': frozenset({2}), 'none': {7}})
  assert metrics['acc_g'] == pytest.approx(400 / 6)
  assert metrics['acc_g_group_strict'] == 100.0
  assert metrics['acc_g_group_loose'] == 50.0
  assert metrics['acc_g_group_two'] == 50.0
  assert metrics['acc_g_group_none'] is None
  assert metrics['acc_g_worst'] == 50.0
  # Without public labels nothing is scored per group.
  assert not any('group' in k or 'worst' in k for k in
                 evaluation.global_model_metrics(task, weights, {'c0': False}))

"""Lockstep training: which models qualify, and each client's batch schedule.

That lockstep rounds equal per-client rounds is tested in test_cohort.py and
test_cohort_ditto.py; here the pieces those tests cannot single out.
"""

import numpy as np
import pytest
import tensorflow as tf

from tasks import digits
from tff_hdp import federated_task
from tff_hdp.learning import lockstep


def _parts(layers):
  def keras_model_fn():
    return tf.keras.Sequential([tf.keras.Input((4,)), *layers(),
                                tf.keras.layers.Dense(3)])
  return federated_task.KerasParts(
      keras_model_fn, tf.keras.losses.SparseCategoricalCrossentropy, list,
      (tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32)))


def test_every_task_model_of_pure_layers_qualifies():
  assert lockstep.supports(digits.load(clients_per_digit=1,
                                       seed=0).keras_parts())
  assert lockstep.supports(_parts(lambda: [
      tf.keras.layers.Dense(5, activation='relu'),
      tf.keras.layers.Reshape((5, 1)), tf.keras.layers.Flatten()]))


@pytest.mark.parametrize('layers', [
    # Random in training: one client's draws would depend on the others'.
    lambda: [tf.keras.layers.Dropout(0.5)],
    # Non-trainable state, batch statistics across clients.
    lambda: [tf.keras.layers.BatchNormalization()],
    # A regularization loss the functional loss would leave out.
    lambda: [tf.keras.layers.Dense(
        5, kernel_regularizer=tf.keras.regularizers.L2(0.1))],
])
def test_models_that_are_not_pure_keep_the_loop(layers):
  assert not lockstep.supports(_parts(layers))


def test_metrics_it_cannot_compute_are_refused():
  task = digits.load(clients_per_digit=1, seed=0)
  parts = task.keras_parts()
  no_metrics = federated_task.KerasParts(parts.keras_model_fn, parts.loss_fn, list,
                                   parts.input_spec)
  with pytest.raises(ValueError, match='sparse_categorical_accuracy'):
    lockstep.lockstep_model(task.tff_model_fn(), no_metrics)


def test_each_client_takes_its_own_batches_epochs_times_then_idles():
  # Client 0: 3 examples (batches [0,1], [2]); client 1: none; client 2: 5
  # examples (batches [0,1], [2,3], [4]). Two epochs, batch size 2.
  counts = tf.constant([3, 0, 5])
  data = tf.constant(np.arange(15).reshape(3, 5) * 10)  # row k, example i
  assert int(lockstep.num_steps(counts, 2, 2)) == 6
  expected_real = {0: [[0, 1], [2], [0, 1], [2], [], []],
                   2: [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4]]}
  for t in range(6):
    batch, mask, active = lockstep._step_batches(data, counts, 2, 2, t)
    assert batch.shape == (3, 2)
    for k, steps in expected_real.items():
      real = steps[t]
      assert bool(active[k]) == bool(real)
      np.testing.assert_array_equal(mask[k].numpy(),
                                    [1.0] * len(real) + [0.0] * (2 - len(real)))
      np.testing.assert_array_equal(batch[k, :len(real)].numpy(),
                                    [(5 * k + i) * 10 for i in real])
    assert not bool(active[1]) and not mask[1].numpy().any()


def test_a_client_whose_rows_go_non_finite_is_singled_out():
  stacked = [tf.constant([[1.0, 2.0], [np.nan, 0.0], [3.0, 4.0]]),
             tf.constant([[1.0], [1.0], [np.inf]])]
  np.testing.assert_array_equal(lockstep.finite_rows(stacked).numpy(),
                                [True, False, False])

"""A client whose update is NaN/Inf is dropped before aggregation and counted."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.learning import client_work
from tff_hdp.learning import fedhdp
from tff_hdp.aggregators import HeterogeneousDPFactory

pytestmark = pytest.mark.tf


def test_nan_client_is_excluded_and_model_stays_finite():
  task = digits.load(clients_per_digit=2, seed=0)
  factory = HeterogeneousDPFactory([0.0, 0.0], [1.0, 1.0], [None, None],
                                   initial_clip_norm=1.0,
                                   clip_learning_rate=0.0)
  process = fedhdp.build_fedhdp(task.tff_model_fn(), factory, 2,
                                tff.learning.optimizers.build_sgdm(0.1))
  ids = task.client_ids[:3]
  data = [client_work.make_client_data(task.train_dataset(c, 0),
                                       np.eye(2, dtype=np.float32)[i % 2])
          for i, c in enumerate(ids)]
  x, y = task.client_train[ids[0]]
  poisoned = tf.data.Dataset.from_tensor_slices(
      (np.full_like(x, np.nan), y)).batch(task.batch_size)
  data[0] = client_work.make_client_data(poisoned,
                                         np.eye(2, dtype=np.float32)[0])
  out = process.next(process.initialize(), data)
  assert out.metrics['client_work']['num_non_finite_updates'] == 1
  # Client 0 is dropped: group 0 keeps client 2, group 1 has client 1.
  np.testing.assert_array_equal(
      out.metrics['aggregator']['group_client_counts'], [1.0, 1.0])
  weights = process.get_model_weights(out.state)
  for w in weights.trainable:
    assert np.all(np.isfinite(w))
  assert any(np.any(w != 0) for w in weights.trainable)

"""The task record refuses data a run could not train on."""

import numpy as np
import pytest
import tensorflow as tf

from tff_hdp.federated_task import FederatedTask

pytestmark = pytest.mark.tf


def _task(client_x, server_x=None):
  y = np.zeros((len(client_x),), np.int32)
  server_x = client_x if server_x is None else server_x
  return FederatedTask(
      name='toy', client_train={'a': (client_x, y)},
      client_test={'a': (client_x, y)},
      server_test=(server_x, np.zeros((len(server_x),), np.int32)),
      keras_model_fn=lambda: tf.keras.Sequential(
          [tf.keras.layers.Dense(2, input_shape=(3,))]),
      loss_fn=tf.keras.losses.SparseCategoricalCrossentropy, batch_size=2)


def test_finite_data_is_accepted():
  assert _task(np.ones((4, 3), np.float32)).client_ids == ['a']


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
def test_a_non_finite_feature_is_refused_naming_the_client(bad):
  x = np.ones((4, 3), np.float32)
  x[2, 1] = bad
  with pytest.raises(ValueError, match=r"client 'a'\'s training data has 1 "
                     r'non-finite \(NaN or inf\) features'):
    _task(x)


def test_a_non_finite_server_test_feature_is_refused():
  x = np.ones((4, 3), np.float32)
  server = x.copy()
  server[0, 0] = np.nan
  with pytest.raises(ValueError, match='the server test set has 1'):
    _task(x, server)

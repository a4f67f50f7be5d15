"""TFF's own learning processes with this library's server rules.

Checked against TFF's stock FedAvg, not against the library: without noise
and with a clip no update reaches, the per-group rule with denominators
equal to the groups' counts is the plain mean, so the group-weighted
process must move the model exactly as `build_unweighted_fed_avg` does; a
client whose group index is out of range weighs nothing. The untrusted
rules run inside `build_unweighted_fed_avg(model_aggregator=...)`; the
coordinate median's round equals the median of the clients' own updates,
each measured by a stock one-client round.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import CoordinateMedianFactory
from tff_hdp.aggregators import HeterogeneousDPFactory
from tff_hdp.aggregators import PFAFactory
from tff_hdp.aggregators import RobustHDPFactory
from tff_hdp.learning import group_fed_avg
from tff_hdp.simulation import runtime

pytestmark = pytest.mark.tf

_RNG = np.random.default_rng(7)
_CLIENTS = [(_RNG.normal(size=(6, 3)).astype(np.float32),
             _RNG.normal(size=(6, 1)).astype(np.float32)) for _ in range(5)]
_SPEC = (tf.TensorSpec([None, 3], tf.float32),
         tf.TensorSpec([None, 1], tf.float32))


@pytest.fixture(scope='module', autouse=True)
def _runtime():
  runtime.init()


def _model_fn():
  keras = tf.keras.Sequential([tf.keras.layers.Dense(
      1, input_shape=(3,), kernel_initializer='ones')])
  return tff.learning.models.from_keras_model(
      keras, loss=tf.keras.losses.MeanSquaredError(), input_spec=_SPEC)


def _dataset(i):
  return tf.data.Dataset.from_tensor_slices(_CLIENTS[i]).batch(3)


def _client_sgd():
  return tff.learning.optimizers.build_sgdm(0.1)


def _server_sgd():
  return tff.learning.optimizers.build_sgdm(1.0)


def _stock_round(clients, aggregator=None):
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn, _client_sgd(), _server_sgd(), model_aggregator=aggregator)
  state = process.initialize()
  output = process.next(state, [_dataset(i) for i in clients])
  return process.get_model_weights(output.state).trainable, output.metrics


def _grouped_round(groups, counts):
  aggregator = HeterogeneousDPFactory.gaussian_fixed(
      [0.0] * len(counts), [float(c) for c in counts], clip=1e6, seed=1)
  process = group_fed_avg.build_group_weighted_fed_avg(
      _model_fn, _client_sgd(), _server_sgd(), num_groups=len(counts),
      model_aggregator=aggregator)
  state = process.initialize()
  output = process.next(state, [
      _with_group_index(_dataset(i), g) for i, g in enumerate(groups)])
  return process.get_model_weights(output.state).trainable


def _with_group_index(dataset, group):
  """The client data `attach_group` makes, any index allowed: what a
  dataset built by hand may hold."""
  return dataset.map(lambda *batch: (batch, tf.constant(group, tf.int32)))


def _assert_weights_close(got, want):
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_without_noise_the_group_rule_is_stock_fedavg():
  want, _ = _stock_round(range(5))
  got = _grouped_round([0, 1, 1, 0, 1], counts=[2, 3])
  _assert_weights_close(got, want)
  assert not np.allclose(want[0], 1.0)  # the round moved the model


def test_a_client_outside_every_group_weighs_nothing():
  want, _ = _stock_round([0, 1, 2, 3])
  got = _grouped_round([0, 1, 1, 0, 5], counts=[2, 2])
  _assert_weights_close(got, want)


@pytest.mark.parametrize('group', [5, 3, -1, 1.0, True])
def test_attaching_a_group_outside_the_groups_is_refused(group):
  """Such a client would weigh nothing in the process: refused where its
  group is attached, not lost silently."""
  with pytest.raises(ValueError, match=r'group must be an int in 0\.\.2'):
    group_fed_avg.attach_group(_dataset(0), group, 3)
  with pytest.raises(ValueError, match='num_groups must be an int >= 1'):
    group_fed_avg.attach_group(_dataset(0), 0, 0)


def test_attach_group_puts_the_index_beside_each_batch():
  batches = list(group_fed_avg.attach_group(_dataset(0), 2, 3))
  assert [int(g) for _, g in batches] == [2, 2]
  np.testing.assert_array_equal(batches[0][0][0], _CLIENTS[0][0][:3])


def test_tffs_stock_weighted_builder_points_to_the_group_builder():
  """TFF's build_weighted_fed_avg gives the factory a scalar weight: the
  error names the builder that gives it the group vector."""
  with pytest.raises(TypeError, match='build_group_weighted_fed_avg'):
    tff.learning.algorithms.build_weighted_fed_avg(
        _model_fn, _client_sgd(),
        model_aggregator=HeterogeneousDPFactory.gaussian_fixed(
            [1.0, 0.0], [2.0, 2.0], clip=1.0, seed=1))


def test_the_weight_must_be_the_group_vector():
  with pytest.raises(ValueError, match='num_groups must be >= 1, got 0'):
    group_fed_avg.build_group_weighted_fed_avg(
        _model_fn, _client_sgd(), num_groups=0,
        model_aggregator=HeterogeneousDPFactory.gaussian_fixed(
            [0.0], [1.0], clip=1.0, seed=1))


def test_the_median_in_stock_fedavg_is_the_median_of_the_client_updates():
  start = np.ones((3, 1), np.float32)
  alone = [_stock_round([i])[0][0] - start for i in range(3)]
  got, _ = _stock_round(range(3), CoordinateMedianFactory())
  np.testing.assert_allclose(got[0] - start, np.median(alone, axis=0),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('factory', [RobustHDPFactory, PFAFactory])
def test_the_untrusted_rules_train_in_stock_fedavg(factory):
  weights, metrics = _stock_round(range(5), factory())
  assert all(np.all(np.isfinite(w)) for w in weights)
  assert not np.allclose(weights[0], 1.0)
  assert isinstance(metrics['aggregator'], collections.OrderedDict)

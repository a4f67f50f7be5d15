"""Robust-HDP, PFA and the weighted rules, alone and in a learning process."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy import plans
from tff_hdp.learning import dp_sgd
from tff_hdp.learning import algorithms
from tff_hdp.learning import noise_aware
from tff_hdp.aggregators import pfa
from tff_hdp.aggregators import robust_hdp

pytestmark = pytest.mark.tf

VALUE_TYPE = collections.OrderedDict(
    kernel=tff.TensorType(np.float32, [40, 3]),
    bias=tff.TensorType(np.float32, [3]))
P = 123


def _updates(stds, seed=0):
  rng = np.random.default_rng(seed)
  signal = rng.normal(size=P)
  flat = [signal + s * rng.normal(size=P) for s in stds]
  return [
      collections.OrderedDict(kernel=f[:120].reshape(40, 3).astype(np.float32),
                              bias=f[120:].astype(np.float32)) for f in flat
  ], np.stack(flat)


def _flat(value):
  return np.concatenate([np.ravel(value['kernel']), np.ravel(value['bias'])])


@pytest.mark.parametrize('factory',
                         [robust_hdp.RobustHDPFactory(), pfa.PFAFactory()])
def test_server_rule_next_receives_only_the_updates(factory):
  assert isinstance(factory, tff.aggregators.UnweightedAggregationFactory)
  parameter = factory.create(VALUE_TYPE).next.type_signature.parameter
  assert len(parameter) == 2
  client_inputs = [t for t in parameter if t.placement is tff.CLIENTS]
  assert len(client_inputs) == 1
  assert client_inputs[0].member.is_equivalent_to(tff.types.to_type(VALUE_TYPE))


def test_robust_hdp_weights_noisier_updates_less_and_averages_with_them():
  stds = [0.05, 0.1, 0.5, 1.0, 2.0, 0.2]
  values, flat = _updates(stds)
  process = robust_hdp.RobustHDPFactory().create(VALUE_TYPE)
  out = process.next(process.initialize(), values)
  m = out.measurements
  weights = m['weights']
  assert weights.sum() == pytest.approx(1.0, rel=1e-5)
  assert bool(m['rpca_converged']) and not bool(m['weights_frozen'])
  np.testing.assert_allclose(weights, 1 / m['noise_variance_estimates'] /
                             np.sum(1 / m['noise_variance_estimates']),
                             rtol=1e-4)
  # Inputs are accumulated in the order given.
  assert weights[0] > weights[1] > weights[5] > weights[2] > weights[3] > \
      weights[4]
  np.testing.assert_allclose(_flat(out.result), weights @ flat, rtol=1e-4,
                             atol=1e-5)


def test_robust_hdp_reports_non_convergence():
  values, _ = _updates([0.1, 1.0, 0.5])
  process = robust_hdp.RobustHDPFactory(max_iterations=1).create(VALUE_TYPE)
  m = process.next(process.initialize(), values).measurements
  assert not bool(m['rpca_converged'])
  assert int(m['rpca_iterations']) == 1


def test_robust_hdp_recomputes_by_default_and_can_freeze_after_round_k():
  first, _ = _updates([0.1, 1.0, 0.5])
  second, _ = _updates([1.0, 0.1, 0.5], seed=1)
  for freeze, frozen_in_round_3 in ((None, False), (2, True)):
    process = robust_hdp.RobustHDPFactory(
        freeze_after_round=freeze).create(VALUE_TYPE)
    state = process.initialize()
    seen = []
    for values in (first, first, second):
      out = process.next(state, values)
      state = out.state
      seen.append(out.measurements)
    assert not seen[1]['weights_frozen']
    assert bool(seen[2]['weights_frozen']) == frozen_in_round_3
    if frozen_in_round_3:
      np.testing.assert_array_equal(seen[2]['weights'], seen[1]['weights'])
      assert np.all(np.isnan(seen[2]['noise_variance_estimates']))
    else:
      assert seen[2]['weights'][1] > seen[2]['weights'][0]


def test_pfa_projects_private_sum_onto_public_top_subspace():
  rng = np.random.default_rng(4)
  rows = rng.normal(size=(6, 30))
  public = np.array([True, True, True, False, False, False])
  combined = pfa.pfa_combine(tf.constant(rows, tf.float32),
                             tf.constant(public), 2)
  second_moment = rows[public].T @ rows[public]
  _, vectors = np.linalg.eigh(second_moment)
  v_k = vectors[:, -2:]
  expected = (rows[public].sum(0) + v_k @ v_k.T @ rows[~public].sum(0)) / 6
  np.testing.assert_allclose(combined.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('public', [[False] * 3, [True] * 3])
def test_pfa_with_one_group_only_is_the_mean(public):
  rows = np.random.default_rng(5).normal(size=(3, 10))
  combined = pfa.pfa_combine(tf.constant(rows, tf.float32),
                             tf.constant(public), 1)
  np.testing.assert_allclose(combined.numpy(), rows.mean(0), rtol=1e-5)


def test_pfa_process_partitions_by_update_norm_and_reports_it():
  stds = [0.05, 3.0, 0.1, 2.5, 3.5, 2.0]
  values, flat = _updates(stds)
  process = pfa.PFAFactory(projection_rank=2).create(VALUE_TYPE)
  out = process.next(process.initialize(), values)
  m = out.measurements
  # Inputs are accumulated in the order given.
  public = np.array([True, False, True, False, False, False])
  np.testing.assert_array_equal(m['public'], public)
  assert (int(m['num_public']), int(m['num_private'])) == (2, 4)
  assert bool(m['mixture_converged']) and int(m['mixture_iterations']) >= 1
  np.testing.assert_allclose(m['update_norms'], np.linalg.norm(flat, axis=1),
                             rtol=1e-5)
  assert m['mixture_means'][0] < m['mixture_means'][1]
  expected = pfa.pfa_combine(tf.constant(flat, tf.float32),
                             tf.constant(public), 2)
  np.testing.assert_allclose(_flat(out.result), expected.numpy(), rtol=1e-4,
                             atol=1e-5)


def test_pfa_refuses_bad_settings():
  with pytest.raises(ValueError, match='projection rank'):
    pfa.PFAFactory(projection_rank=0)
  with pytest.raises(ValueError, match='EM needs'):
    pfa.PFAFactory(max_iterations=0)


def _plans(rule):
  return plans.plan_clients(noise_aware.client_epsilons(rule, [0.5, 2.0, 8.0]), 1e-5,
                                       [100, 200, 300], [16, 64, 32], 5)


def test_client_weights_of_each_rule():
  plans = _plans('weiavg')
  w = lambda rule, q: noise_aware.client_weight(rule, q, 0.1, 1.0, 50)
  assert [w('weiavg', q) for q in plans] == [0.5, 2.0, 8.0]
  assert [w('dpfedavg', q) for q in plans] == [100.0, 200.0, 300.0]
  assert [w('robust_hdp', q) for q in plans] == [1.0, 1.0, 1.0]
  assert [w('pfa', q) for q in plans] == [1.0, 1.0, 1.0]
  oracle = [w('oracle', q) for q in plans]
  for weight, q in zip(oracle, plans):
    sigma2 = (q.steps_per_round * 0.1**2 * 50 * q.noise_multiplier**2 /
              (q.sampling_rate * q.num_examples)**2)
    assert weight == pytest.approx(1 / sigma2, rel=1e-9)
  assert {q.epsilon for q in _plans('min_epsilon')} == {0.5}


def test_unknown_rule_is_refused():
  with pytest.raises(ValueError, match='unknown untrusted-server algorithm'):
    noise_aware.build_aggregator('fedhdp')


def _model_fn():
  spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))
  return lambda: tff.learning.models.from_keras_model(
      tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                           tf.keras.layers.Dense(2)]),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=spec)


def _loss(y, logits):
  return tf.keras.losses.sparse_categorical_crossentropy(y, logits,
                                                         from_logits=True)


@pytest.mark.parametrize('rule,options', [
    ('robust_hdp', {}), ('oracle', {}), ('pfa', {'projection_rank': 2}),
])
def test_learning_process_runs_a_round_with_each_kind_of_rule(rule, options):
  process = noise_aware.build_noise_aware_fedavg(
      _model_fn(), _loss, noise_aware.build_aggregator(rule, **options),
      learning_rate=0.1, clip_norm=1.0)
  rng = np.random.default_rng(0)
  clients = []
  for i, plan in enumerate(_plans(rule)):
    x = rng.normal(size=(plan.num_examples, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    clients.append(dp_sgd.make_client_data(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(32), plan,
        noise_aware.client_weight(rule, plan, 0.1, 1.0, 10), seed=i))
  state = process.initialize()
  out = process.next(state, clients)
  before = process.get_model_weights(state).trainable
  after = process.get_model_weights(out.state).trainable
  assert not np.allclose(before[0], after[0])
  assert np.all(np.isfinite(after[0]))
  # What rounds.csv reports of this rule: whole numbers the factory measures.
  for m in algorithms.record(rule, algorithms.UNTRUSTED).measurements:
    value = np.asarray(out.metrics['aggregator'][m.name])
    assert value.shape == () and value.dtype.kind in 'biu', (m.name, value)
    assert m.kind is int and not m.per_group
  if rule == 'robust_hdp':
    assert bool(out.metrics['aggregator']['rpca_converged'])
  if rule == 'pfa':
    assert bool(out.metrics['aggregator']['mixture_converged'])
    assert len(out.metrics['aggregator']['public']) == 3
    assert (out.metrics['aggregator']['num_public'] +
            out.metrics['aggregator']['num_private']) == 3

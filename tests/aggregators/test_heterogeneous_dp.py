"""The group-wise DP aggregator against numpy and against TFF's DP-FedAvg."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.aggregators import signatures
from tff_hdp.aggregators import CohortHeterogeneousDPFactory
from tff_hdp.aggregators import HeterogeneousDPFactory

pytestmark = pytest.mark.tf

VEC = tff.TensorType(np.float32, [4])


def _one_hot(j, l=2):
  v = np.zeros(l, np.float32)
  v[j] = 1
  return v


def _clip(x, s):
  return x * min(1.0, s / np.linalg.norm(x))


def test_non_private_single_group_is_clipped_fedavg():
  rng = np.random.default_rng(0)
  values = [rng.normal(size=4).astype(np.float32) for _ in range(7)]
  factory = HeterogeneousDPFactory([0.0], [1.0], [None], initial_clip_norm=1.5,
                                   clip_learning_rate=0.0)
  process = factory.create(VEC, tff.TensorType(np.float32, [1]))
  out = process.next(process.initialize(), values, [_one_hot(0, 1)] * 7)
  expected = np.mean([_clip(v, 1.5) for v in values], axis=0)
  np.testing.assert_allclose(out.result, expected, rtol=1e-6, atol=1e-7)
  assert out.measurements['num_clients'] == 7


def test_single_group_matches_tff_dp_fedavg_adaptive_clipping():
  # Noise-free, so both are deterministic: same result and clip-norm path.
  m = 6
  ours = HeterogeneousDPFactory(
      [0.0], [1.0], [float(m)], initial_clip_norm=0.7,
      target_unclipped_quantile=0.3, clip_learning_rate=0.4,
      clip_count_stddev=0.0, expected_clients_per_round=float(m)).create(
          VEC, tff.TensorType(np.float32, [1]))
  theirs = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      noise_multiplier=0.0, clients_per_round=float(m),
      initial_l2_norm_clip=0.7, target_unclipped_quantile=0.3,
      learning_rate=0.4, clipped_count_stddev=0.0).create(VEC)
  s_ours, s_theirs = ours.initialize(), theirs.initialize()
  rng = np.random.default_rng(1)
  for _ in range(4):
    values = [(rng.normal(size=4) * rng.uniform(0.1, 2)).astype(np.float32)
              for _ in range(5)]  # 5 realized of 6 expected clients
    o = ours.next(s_ours, values, [_one_hot(0, 1)] * 5)
    t = theirs.next(s_theirs, values)
    np.testing.assert_allclose(o.result, t.result, rtol=1e-5, atol=1e-7)
    s_ours, s_theirs = o.state, t.state
  # TFF reports the clip norm after the round's update.
  their_clip = float(t.measurements['dp_query_metrics']['clip'])
  assert float(s_ours['clip_norm']) == pytest.approx(their_clip, rel=1e-5)
  assert their_clip != pytest.approx(0.7, rel=1e-3)  # it did adapt


def test_weighted_combination_of_group_means():
  rng = np.random.default_rng(2)
  values = [rng.normal(size=4).astype(np.float32) for _ in range(9)]
  groups = [0, 1, 2, 0, 1, 0, 2, 0, 0]
  r = [0.2, 1.0, 0.5]
  factory = HeterogeneousDPFactory([0.0] * 3, r, [None] * 3,
                                   initial_clip_norm=1.0,
                                   clip_learning_rate=0.0)
  process = factory.create(VEC, tff.TensorType(np.float32, [3]))
  out = process.next(process.initialize(), values,
                     [_one_hot(g, 3) for g in groups])
  counts = np.bincount(groups, minlength=3)
  w = np.array(r) * counts / np.sum(np.array(r) * counts)
  means = [np.mean([_clip(v, 1.0) for v, g in zip(values, groups) if g == j],
                   axis=0) for j in range(3)]
  np.testing.assert_allclose(out.result, sum(wj * mj for wj, mj in
                                             zip(w, means)), rtol=1e-5)
  np.testing.assert_allclose(out.measurements['group_weights'], w, rtol=1e-6)
  np.testing.assert_array_equal(out.measurements['group_client_counts'],
                                counts)


@pytest.mark.parametrize('factory', [HeterogeneousDPFactory,
                                     HeterogeneousDPFactory.gaussian_fixed])
def test_counts_no_epsilon_covers_read_nan_unless_released(factory):
  """Group 0 has noise, group 1 none; a fixed clip: by default the noisy
  group's exact count, the total and the exact clipped fraction read NaN,
  and the group without guarantee's count is released."""
  values = [np.ones(4, np.float32)] * 5  # norm 2 > clip 1: all clipped
  weights = [_one_hot(g) for g in (0, 0, 1, 1, 1)]

  def measured(**release):
    if factory is HeterogeneousDPFactory:
      made = factory([1.0, 0.0], [1.0, 1.0], [2.0, None], 1.0,
                     clip_learning_rate=0.0, seed=1, **release)
    else:
      made = factory([1.0, 0.0], [2.0, 3.0], 1.0, seed=1, **release)
    process = made.create(VEC, tff.TensorType(np.float32, [2]))
    return process.next(process.initialize(), values, weights).measurements

  withheld = measured()
  counts = withheld['group_client_counts']
  assert np.isnan(counts[0]) and counts[1] == 3.0
  assert np.isnan(withheld['num_clients'])
  assert np.isnan(withheld['fraction_clipped_estimate'])
  assert np.isnan(withheld['unclipped_fraction_estimate'])
  released = measured(release_unprotected_counts=True)
  assert released['group_client_counts'].tolist() == [2.0, 3.0]
  assert released['num_clients'] == 5.0
  assert released['fraction_clipped_estimate'] == 1.0


def test_adaptive_clipping_releases_its_noisy_clipped_fraction():
  """With adaptive clipping the clipped fraction is the accounted noisy
  count's: released by default, unlike the exact counts."""
  factory = HeterogeneousDPFactory.gaussian_adaptive(
      [1.0, 0.0], [2.0, 3.0], initial_l2_norm_clip=1.0,
      clipped_count_stddev=0.5, seed=1)
  process = factory.create(VEC, tff.TensorType(np.float32, [2]))
  out = process.next(process.initialize(), [np.ones(4, np.float32)] * 3,
                     [_one_hot(0), _one_hot(1), _one_hot(1)])
  assert np.isfinite(out.measurements['fraction_clipped_estimate'])
  assert np.isnan(out.measurements['group_client_counts'][0])
  assert np.isnan(out.measurements['num_clients'])


def test_empty_realized_group_gets_weight_zero():
  values = [np.ones(4, np.float32) * 0.1] * 3
  factory = HeterogeneousDPFactory([0.0, 0.0], [0.3, 1.0], [None, None],
                                   initial_clip_norm=1.0,
                                   clip_learning_rate=0.0)
  process = factory.create(VEC, tff.TensorType(np.float32, [2]))
  out = process.next(process.initialize(), values, [_one_hot(0)] * 3)
  np.testing.assert_allclose(out.measurements['group_weights'], [1.0, 0.0])
  np.testing.assert_allclose(out.result, values[0], rtol=1e-6)


@pytest.mark.parametrize('isolate', [0, 1])
def test_per_group_noise_std_with_zero_updates(isolate):
  # Each coordinate is an independent draw; isolate one group with r.
  p = 40000
  z = [1.3, 0.4]
  d = [7.0, 25.0]
  s = 0.8
  r = [1.0 if j == isolate else 0.0 for j in range(2)]
  factory = HeterogeneousDPFactory(z, r, d, initial_clip_norm=s,
                                   clip_learning_rate=0.0, seed=11)
  process = factory.create(tff.TensorType(np.float32, [p]),
                           tff.TensorType(np.float32, [2]))
  zeros = [np.zeros(p, np.float32)] * 5
  out = process.next(process.initialize(), zeros,
                     [_one_hot(0), _one_hot(1), _one_hot(0), _one_hot(1),
                      _one_hot(1)])
  expected = z[isolate] * s / d[isolate]
  assert np.std(out.result) == pytest.approx(expected, rel=0.02)
  assert abs(np.mean(out.result)) < 5 * expected / np.sqrt(p)
  assert out.measurements['group_noise_stddev'][isolate] == pytest.approx(
      expected, rel=1e-6)


def test_noise_is_reproducible_from_the_seed_and_fresh_each_round():
  def run(seed):
    factory = HeterogeneousDPFactory([1.0], [1.0], [3.0], 1.0,
                                     clip_learning_rate=0.2,
                                     clip_count_stddev=0.5,
                                     expected_clients_per_round=3.0, seed=seed)
    process = factory.create(VEC, tff.TensorType(np.float32, [1]))
    state = process.initialize()
    results = []
    for _ in range(2):
      out = process.next(state, [np.ones(4, np.float32)] * 3,
                         [_one_hot(0, 1)] * 3)
      state = out.state
      results.append(np.asarray(out.result))
    return results, float(state['clip_norm'])

  a, clip_a = run(5)
  b, clip_b = run(5)
  c, _ = run(6)
  np.testing.assert_array_equal(a[0], b[0])
  np.testing.assert_array_equal(a[1], b[1])
  assert clip_a == clip_b
  assert not np.array_equal(a[0], a[1])
  assert not np.array_equal(a[0], c[0])


def test_adaptive_clip_norm_update_formula():
  # Noise-free: 2 of 4 clients unclipped -> fraction 0.5 vs kappa 0.25.
  values = [np.full(4, v, np.float32) for v in (0.1, 0.2, 5.0, 6.0)]
  factory = HeterogeneousDPFactory([0.0], [1.0], [None], 1.0,
                                   target_unclipped_quantile=0.25,
                                   clip_learning_rate=0.3)
  process = factory.create(VEC, tff.TensorType(np.float32, [1]))
  out = process.next(process.initialize(), values, [_one_hot(0, 1)] * 4)
  assert float(out.state['clip_norm']) == pytest.approx(
      np.exp(-0.3 * (0.5 - 0.25)), rel=1e-6)
  assert float(out.measurements['fraction_clipped_estimate']) == 0.5


def test_structured_values_keep_their_structure():
  value_type = collections.OrderedDict(
      w=tff.TensorType(np.float32, [2, 3]), b=tff.TensorType(np.float32, [3]))
  factory = HeterogeneousDPFactory([0.0], [1.0], [None], 100.0,
                                   clip_learning_rate=0.0)
  process = factory.create(value_type, tff.TensorType(np.float32, [1]))
  v = collections.OrderedDict(w=np.ones((2, 3), np.float32),
                              b=np.arange(3, dtype=np.float32))
  out = process.next(process.initialize(), [v, v], [_one_hot(0, 1)] * 2)
  np.testing.assert_allclose(out.result['w'], v['w'])
  np.testing.assert_allclose(out.result['b'], v['b'])


def test_bad_configurations_are_refused():
  with pytest.raises(ValueError, match='clip-count noise'):
    HeterogeneousDPFactory([1.0], [1.0], [5.0], 1.0, clip_learning_rate=0.2,
                           clip_count_stddev=0.0)
  with pytest.raises(ValueError, match='one each per'):
    HeterogeneousDPFactory([1.0, 0.0], [1.0], [5.0, None], 1.0)
  with pytest.raises(ValueError, match='ratio r'):
    HeterogeneousDPFactory([0.0], [-1.0], [None], 1.0)
  with pytest.raises(TypeError, match='one-hot privacy-group'):
    HeterogeneousDPFactory([0.0], [1.0], [None], 1.0).create(
        VEC, tff.TensorType(np.float32))


class _CountingSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """An inner sum that also counts its calls in its state and reports the
  number of contributions it summed: a stand-in for secure aggregation."""

  def create(self, value_type):
    inner = tff.aggregators.SumFactory().create(value_type)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_value(np.int32(0), tff.SERVER)

    @tff.tensorflow.computation(np.int32)
    def plus_one(calls):
      return calls + 1

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(calls, value):
      summed = inner.next(inner.initialize(), value)
      return tff.templates.MeasuredProcessOutput(
          tff.federated_map(plus_one, calls), summed.result,
          tff.federated_sum(tff.federated_value(np.int32(1), tff.CLIENTS)))

    return tff.templates.AggregationProcess(init_fn, next_fn)


def test_type_signatures_hold_the_inner_sum():
  factory = HeterogeneousDPFactory([1.0, 0.0], [0.5, 1.0], [3.0, None],
                                   initial_clip_norm=1.0,
                                   clip_count_stddev=1.0,
                                   value_sum_factory=_CountingSumFactory())
  process = factory.create(VEC, tff.TensorType(np.float32, [2]))
  state = process.initialize.type_signature.result
  assert state.placement == tff.SERVER
  assert tff.structure.name_list(state.member) == [
      'clip_norm', 'round_num', 'seed', 'value_sum']
  assert state.member['value_sum'] == tff.TensorType(np.int32)
  next_type = process.next.type_signature
  assert next_type.result.result == tff.FederatedType(VEC, tff.SERVER)
  assert 'value_sum' in tff.structure.name_list(
      next_type.result.measurements.member)
  with pytest.raises(TypeError, match='one-hot privacy-group vector'):
    factory.create(VEC, tff.TensorType(np.float32, [3]))


@pytest.mark.parametrize('factory, value, weight', [
    (HeterogeneousDPFactory, VEC, tff.TensorType(np.float32, [2])),
    # A cohort of K clients: their updates stacked, their group rows [K, l].
    (CohortHeterogeneousDPFactory, tff.TensorType(np.float32, [None, 4]),
     tff.TensorType(np.float32, [None, 2])),
])
def test_type_signatures_show_cohorts_change_only_what_the_clients_send(
    factory, value, weight):
  """Per-client or cohort, the server has the same state, returns one
  (unstacked) update and measures the same; only the clients' value and
  weight types differ. The inner sum is the default, stateless and
  unmeasured."""
  process = factory([1.0, 0.0], [0.5, 1.0], [3.0, None], initial_clip_norm=1.0,
                    clip_count_stddev=1.0).create(value, weight)
  per_group = tff.TensorType(np.float32, [2])
  signatures.assert_signatures(
      process,
      state=collections.OrderedDict(clip_norm=np.float32, round_num=np.int64,
                                    seed=np.int64, value_sum=()),
      client_inputs={'value': value, 'weight': weight}, result=VEC,
      measurements=collections.OrderedDict(
          clip_norm=np.float32, num_clients=np.float32,
          group_client_counts=per_group, group_weights=per_group,
          group_noise_stddev=per_group,
          unclipped_fraction_estimate=np.float32,
          fraction_clipped_estimate=np.float32, value_sum=()))


def test_another_inner_sum_factory_composes_and_changes_nothing():
  rng = np.random.default_rng(5)
  values = [rng.normal(size=4).astype(np.float32) for _ in range(5)]
  weights = [_one_hot(i % 2) for i in range(5)]
  args = dict(noise_multipliers=[1.0, 0.0], ratios=[0.5, 1.0],
              expected_group_sizes=[3.0, None], initial_clip_norm=1.0,
              clip_count_stddev=1.0, expected_clients_per_round=5.0, seed=3)
  default = HeterogeneousDPFactory(**args).create(
      VEC, tff.TensorType(np.float32, [2]))
  counting = HeterogeneousDPFactory(
      **args, value_sum_factory=_CountingSumFactory()).create(
          VEC, tff.TensorType(np.float32, [2]))
  a, b = default.initialize(), counting.initialize()
  for round_num in range(1, 3):
    a_out = default.next(a, values, weights)
    b_out = counting.next(b, values, weights)
    a, b = a_out.state, b_out.state
    np.testing.assert_array_equal(a_out.result, b_out.result)
    assert float(a['clip_norm']) == float(b['clip_norm'])
    assert int(b['value_sum']) == round_num
    assert int(b_out.measurements['value_sum']) == 5

"""Merged privacy groups: the merged factory is the inner factory run on the
merged one-hot vectors (bit for bit, noise included), one noise draw for
the merged groups, and an invalid weight stays excluded."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.aggregators import CohortHeterogeneousDPFactory
from tff_hdp.aggregators import HeterogeneousDPFactory
from tff_hdp.aggregators import MergedGroupsFactory

pytestmark = pytest.mark.tf

VEC = tff.TensorType(np.float32, [4])
GROUPS = [0, 1, 2, 0, 1, 0, 2, 1]
PRIVATE = [True, True, False]


def _inner(z=1.0):
  return HeterogeneousDPFactory([z, 0.0], [0.5, 1.0], [4.0, None],
                                initial_clip_norm=1.0, clip_learning_rate=0.2,
                                clip_count_stddev=1.0,
                                expected_clients_per_round=8.0, seed=7,
                                release_unprotected_counts=True)


def _values():
  rng = np.random.default_rng(3)
  return [rng.normal(size=4).astype(np.float32) for _ in GROUPS]


def test_merged_is_the_inner_factory_on_merged_vectors_noise_included():
  merged = MergedGroupsFactory.private_together(_inner(), PRIVATE).create(
      VEC, tff.TensorType(np.float32, [3]))
  direct = _inner().create(VEC, tff.TensorType(np.float32, [2]))
  eye3, eye2 = np.eye(3, dtype=np.float32), np.eye(2, dtype=np.float32)
  state_m, state_d = merged.initialize(), direct.initialize()
  for _ in range(2):  # the second round at the adapted clip norm
    out_m = merged.next(state_m, _values(), [eye3[g] for g in GROUPS])
    out_d = direct.next(state_d, _values(),
                        [eye2[0 if PRIVATE[g] else 1] for g in GROUPS])
    np.testing.assert_array_equal(out_m.result, out_d.result)
    state_m, state_d = out_m.state, out_d.state
    assert out_m.measurements['group_client_counts'].tolist() == [6.0, 2.0]
  np.testing.assert_array_equal(out_m.measurements['group_noise_stddev'],
                                out_d.measurements['group_noise_stddev'])


def test_the_private_mean_carries_one_noise_draw():
  """Without clipping effects (updates 0, fixed denominators), the result
  is the private mean's noise alone: over many seeds its std per
  coordinate is w_p z S / D, one draw's, not sqrt(2) times it (each round
  draws afresh)."""
  inner = HeterogeneousDPFactory([1.0, 0.0], [1.0, 1.0], [4.0, 4.0],
                                 initial_clip_norm=1.0,
                                 clip_learning_rate=0.0, seed=11)
  process = MergedGroupsFactory.private_together(inner, PRIVATE).create(
      VEC, tff.TensorType(np.float32, [3]))
  zeros = [np.zeros(4, np.float32)] * len(GROUPS)
  eye3 = np.eye(3, dtype=np.float32)
  weights = [eye3[g] for g in GROUPS]
  state, results = process.initialize(), []
  for _ in range(300):
    output = process.next(state, zeros, weights)
    state = output.state
    results.append(output.result)
  # w_p = 4 / 8 of the noisy private mean N(0, (1 * 1 / 4)^2): std 0.125.
  assert np.std(results) == pytest.approx(0.125, rel=0.06)


def test_an_invalid_weight_stays_excluded():
  """[0.5, 0.5, 0] is not a group vector: the unmerged factory excludes
  it, and merging must not turn it into the valid [1, 0]."""
  inner = HeterogeneousDPFactory([0.0, 0.0], [1.0, 1.0], [None, None],
                                 initial_clip_norm=10.0,
                                 clip_learning_rate=0.0)
  process = MergedGroupsFactory.private_together(inner, PRIVATE).create(
      VEC, tff.TensorType(np.float32, [3]))
  values = [np.full(4, 1.0, np.float32), np.full(4, 3.0, np.float32)]
  out = process.next(process.initialize(), values,
                     [np.array([1, 0, 0], np.float32),
                      np.array([0.5, 0.5, 0], np.float32)])
  np.testing.assert_allclose(out.result, values[0])
  assert out.measurements['group_client_counts'].tolist() == [1.0, 0.0]


def test_cohorts_merge_each_row():
  inner = CohortHeterogeneousDPFactory([0.0, 0.0], [1.0, 1.0], [None, None],
                                       initial_clip_norm=10.0,
                                       clip_learning_rate=0.0)
  process = MergedGroupsFactory.private_together(inner, PRIVATE).create(
      tff.TensorType(np.float32, [None, 4]),
      tff.TensorType(np.float32, [None, 3]))
  eye3 = np.eye(3, dtype=np.float32)
  cohort = np.stack(_values()[:3])
  out = process.next(process.initialize(), [cohort],
                     [np.stack([eye3[g] for g in GROUPS[:3]])])
  assert out.measurements['group_client_counts'].tolist() == [2.0, 1.0]
  np.testing.assert_allclose(out.result, cohort.mean(axis=0), rtol=1e-5)


def test_bad_weights_and_maps_are_refused():
  factory = MergedGroupsFactory.private_together(_inner(), PRIVATE)
  with pytest.raises(TypeError, match='one-hot vector of the 3 privacy'):
    factory.create(VEC, tff.TensorType(np.float32, [2]))
  with pytest.raises(ValueError, match='numbered 0..m-1'):
    MergedGroupsFactory(_inner(), [0, 2])
  with pytest.raises(ValueError, match='needs at least one'):
    MergedGroupsFactory.private_together(_inner(), [False, False])
  with pytest.raises(TypeError, match='WeightedAggregationFactory'):
    MergedGroupsFactory(object(), [0, 1])


def test_scaled_groups_enter_at_their_scale_and_count_once():
  """Group j's clipped update times a_j in the merged sum; its client
  counted once (the clip count's sensitivity stays 1)."""
  inner = HeterogeneousDPFactory([0.0], [1.0], [None], initial_clip_norm=10.0,
                                 clip_learning_rate=0.0,
                                 release_unprotected_counts=True,
                                 scaled_rows=True)
  process = MergedGroupsFactory(inner, [0, 0, 0], [0.25, 1.0, 0.5]).create(
      VEC, tff.TensorType(np.float32, [3]))
  eye3 = np.eye(3, dtype=np.float32)
  values = [np.full(4, v, np.float32) for v in (4.0, 1.0, 2.0)]
  out = process.next(process.initialize(), values, list(eye3))
  # (0.25 * 4 + 1 * 1 + 0.5 * 2) / 3 realized clients.
  np.testing.assert_allclose(out.result, np.full(4, 1.0), rtol=1e-6)
  assert out.measurements['group_client_counts'].tolist() == [3.0]


def test_bad_scales_are_refused():
  scaled = HeterogeneousDPFactory([1.0], [1.0], [2.0], initial_clip_norm=1.0,
                                  clip_learning_rate=0.0, scaled_rows=True)
  with pytest.raises(ValueError, match=r'in \(0, 1\]'):
    MergedGroupsFactory(scaled, [0, 0], [0.5, 1.5])
  with pytest.raises(ValueError, match='one each'):
    MergedGroupsFactory(scaled, [0, 0], [0.5])
  with pytest.raises(ValueError, match='takes scaled rows'):
    MergedGroupsFactory(_inner(), [0, 1], [0.5, 1.0])

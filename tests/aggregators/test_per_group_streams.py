"""PerGroupStreamsFactory: each group's members through its own stream,
the group means combined by r_j n_j, against hand computations and TFF's
own tree factory run alone."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.aggregators import BltSumFactory
from tff_hdp.aggregators import PerGroupStreamsFactory
from tff_hdp.aggregators.per_group_streams import CohortPerGroupStreamsFactory
from tff_hdp.aggregators.tree_noise import TreeSumFactory
from tff_hdp.privacy import blt

pytestmark = pytest.mark.tf

VALUE = tff.TensorType(np.float32, [3])
WEIGHT = tff.TensorType(np.float32, [2])
TINY = 1e-6  # noise multiplier of a stream whose noise is negligible here


def _clipped_sum(clip):
  return tff.aggregators.clipping_factory(clip, tff.aggregators.SumFactory())


def test_group_means_are_combined_by_ratio_and_count():
  """Group 0 (private, expected count 2) and group 1 (no guarantee,
  realized count); r = (3, 1). Clip 1: [0, 3, 4] counts as [0, .6, .8]."""
  factory = PerGroupStreamsFactory(
      [BltSumFactory(blt.BltParameters((0.9,), (0.3,)), TINY, 1.0, seed=1),
       _clipped_sum(1.0)], [3.0, 1.0], [2.0, None], [TINY, 0.0], 1.0,
      release_unprotected_counts=True)
  process = factory.create(VALUE, WEIGHT)
  values = [np.array([1, 0, 0], np.float32), np.array([0, 3, 4], np.float32),
            np.array([0, 0, 0.5], np.float32)]
  weights = [np.array(w, np.float32) for w in ([1, 0], [1, 0], [0, 1])]
  out = process.next(process.initialize(), values, weights)
  w = np.array([3 * 2, 1 * 1]) / 7.0
  want = w[0] * np.array([1, 0.6, 0.8]) / 2 + w[1] * np.array([0, 0, 0.5])
  np.testing.assert_allclose(out.result, want, atol=1e-4)
  np.testing.assert_allclose(out.measurements['group_client_counts'], [2, 1])
  np.testing.assert_allclose(out.measurements['group_weights'], w, rtol=1e-6)
  np.testing.assert_allclose(out.measurements['group_noise_stddev'],
                             [TINY / 2, 0.0], rtol=1e-6)


def test_a_noisy_groups_count_reads_nan_unless_released():
  """Group 0's stream adds noise, group 1's none: by default only group
  1's exact count is released."""
  def counts(**release):
    factory = PerGroupStreamsFactory(
        [BltSumFactory(blt.BltParameters((0.9,), (0.3,)), 0.5, 1.0, seed=1),
         _clipped_sum(1.0)], [1.0, 1.0], [2.0, None], [0.5, 0.0], 1.0,
        **release)
    process = factory.create(VALUE, WEIGHT)
    weights = [np.array(w, np.float32) for w in ([1, 0], [1, 0], [0, 1])]
    out = process.next(process.initialize(), [np.ones(3, np.float32)] * 3,
                       weights)
    return out.measurements['group_client_counts']

  withheld = counts()
  assert np.isnan(withheld[0]) and withheld[1] == 1.0
  assert counts(release_unprotected_counts=True).tolist() == [2.0, 1.0]


def test_a_client_reaches_only_its_own_groups_stream():
  """A non-finite or invalid row, and another group's update, send zeros:
  group 0's mean is its one member's, whatever the others hold."""
  factory = PerGroupStreamsFactory([_clipped_sum(10.0), _clipped_sum(10.0)],
                                   [1.0, 0.0], [1.0, None], [0.0, 0.0], 10.0)
  process = factory.create(VALUE, WEIGHT)
  member = np.array([1, 2, 3], np.float32)
  values = [member, np.full(3, 9, np.float32), np.full(3, 7, np.float32),
            np.full(3, 5, np.float32)]
  weights = [np.array(w, np.float32) for w in ([1, 0], [0, 1], [1, 1],
                                                [2, 0])]
  out = process.next(process.initialize(), values, weights)
  np.testing.assert_allclose(out.result, member)  # r_1 = 0
  np.testing.assert_allclose(out.measurements['group_client_counts'], [1, 1])


def test_a_tree_stream_adds_tffs_own_tree_noise():
  """Group 0's stream against TFF's `tree_aggregation` factory fed the same
  members, same seed, over four rounds: the same noisy sums."""
  clip, z, seed = 1.0, 0.7, 11
  factory = PerGroupStreamsFactory([TreeSumFactory(z, clip, seed),
                                    _clipped_sum(clip)], [1.0, 0.0],
                                   [1.0, None], [z * clip, 0.0], clip)
  process = factory.create(VALUE, WEIGHT)
  alone = tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
      z, 1.0, clip, tff.types.type_to_tf_tensor_specs(VALUE),
      noise_seed=seed).create(VALUE)
  state, alone_state = process.initialize(), alone.initialize()
  rng = np.random.default_rng(0)
  for _ in range(4):
    values = [rng.normal(size=3).astype(np.float32) for _ in range(3)]
    weights = [np.array(w, np.float32) for w in ([1, 0], [0, 1], [1, 0])]
    out = process.next(state, values, weights)
    want = alone.next(alone_state, [values[0], values[2]])
    state, alone_state = out.state, want.state
    np.testing.assert_allclose(out.result, want.result, rtol=1e-5, atol=1e-6)


def _blt_stream(clip, clip_updates):
  return BltSumFactory(blt.BltParameters((0.8, 0.3), (0.4, 0.2)), 0.5, clip,
                       seed=3, clip_updates=clip_updates)


def _tree_stream(clip, clip_updates):
  return TreeSumFactory(0.5, clip, seed=3, clip_updates=clip_updates)


@pytest.mark.parametrize('stream', [_blt_stream, _tree_stream],
                         ids=['blt', 'tree'])
def test_cohorts_release_what_separate_clients_release(stream):
  """Six devices (one non-finite, one with an invalid row) as six TFF
  clients through clipping streams, and as two cohorts of three whose rows
  the cohort factory clips itself: the same sums, noise and state, round
  after round. The values are large, so a stream that clipped a cohort's
  sum again would differ."""
  clip = 1.0

  def build(cohorts):
    make = CohortPerGroupStreamsFactory if cohorts else PerGroupStreamsFactory
    return make([stream(clip, clip_updates=not cohorts),
                 tff.aggregators.SumFactory() if cohorts
                 else _clipped_sum(clip)],
                [2.0, 1.0], [3.0, None], [0.5, 0.0], clip,
                release_unprotected_counts=True)

  separate = build(False).create(VALUE, WEIGHT)
  cohort = build(True).create(tff.TensorType(np.float32, [None, 3]),
                              tff.TensorType(np.float32, [None, 2]))
  rng = np.random.default_rng(1)
  rows = np.array([[1, 0], [0, 1], [1, 0], [1, 1], [1, 0], [0, 1]],
                  np.float32)
  a, b = separate.initialize(), cohort.initialize()
  for _ in range(3):
    values = (2 * rng.normal(size=(6, 3))).astype(np.float32)
    values[4, 1] = np.nan
    one = separate.next(a, list(values), list(rows))
    two = cohort.next(b, [values[:3], values[3:]], [rows[:3], rows[3:]])
    a, b = one.state, two.state
    np.testing.assert_allclose(two.result, one.result, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(two.measurements['group_client_counts'],
                               [3, 2])


def test_a_group_without_members_has_no_stream_and_no_weight():
  """Three groups, the last (r 5, realized count) with no stream: the
  output is the first two's combination, as with a stream for it that no
  client reaches, and a stray member of it (a row it should not have) is
  left out rather than weighed against an empty sum."""
  values = [np.array([1, 0, 0], np.float32), np.array([0, 3, 4], np.float32),
            np.array([0, 0, 0.5], np.float32)]
  rows = ([1, 0, 0], [1, 0, 0], [0, 1, 0])
  weight = tff.TensorType(np.float32, [3])

  def run(third, rows):
    factory = PerGroupStreamsFactory(
        [_clipped_sum(1.0), _clipped_sum(1.0), third], [3.0, 1.0, 5.0],
        [2.0, None, None], [0.0, 0.0, 0.0], 1.0)
    process = factory.create(VALUE, weight)
    out = process.next(process.initialize(), values,
                       [np.array(r, np.float32) for r in rows])
    return factory, out

  slotless, out = run(None, rows)
  assert slotless.slots == (0, 1)
  _, with_stream = run(_clipped_sum(1.0), rows)
  w = np.array([3 * 2, 1 * 1]) / 7.0
  want = w[0] * np.array([1, 0.6, 0.8]) / 2 + w[1] * np.array([0, 0, 0.5])
  np.testing.assert_allclose(out.result, want, atol=1e-6)
  np.testing.assert_allclose(with_stream.result, want, atol=1e-6)
  np.testing.assert_allclose(out.measurements['group_weights'],
                             [*w, 0], rtol=1e-6)
  _, stray = run(None, ([1, 0, 0], [1, 0, 0], [0, 0, 1]))
  np.testing.assert_allclose(stray.result, np.array([1, 0.6, 0.8]) / 2,
                             atol=1e-6)
  np.testing.assert_allclose(stray.measurements['group_weights'], [1, 0, 0])


def test_bad_settings_are_refused():
  with pytest.raises(ValueError, match='one each per privacy group'):
    PerGroupStreamsFactory([_clipped_sum(1.0)], [1.0, 1.0], [1.0], [0.0], 1.0)
  with pytest.raises(TypeError, match='UnweightedAggregationFactory'):
    PerGroupStreamsFactory([tff.aggregators.MeanFactory()], [1.0], [1.0],
                           [0.0], 1.0)
  with pytest.raises(ValueError, match='ratio'):
    PerGroupStreamsFactory([_clipped_sum(1.0)], [-1.0], [1.0], [0.0], 1.0)
  with pytest.raises(ValueError, match='no group has a stream'):
    PerGroupStreamsFactory([None], [1.0], [None], [0.0], 1.0)
  factory = PerGroupStreamsFactory([_clipped_sum(1.0)], [1.0], [1.0], [0.0],
                                   1.0)
  with pytest.raises(TypeError, match='one-hot privacy-group vector'):
    factory.create(VALUE, WEIGHT)

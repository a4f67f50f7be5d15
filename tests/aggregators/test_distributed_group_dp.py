"""DistributedGroupDPFactory: the trusted per-group rule's output at small
noise, the noise std the accounting assumes (Monte Carlo, discrete
Gaussian and Skellam), each group at its own bits, and TFF's checks of
the bit width."""

import math

import numpy as np
import pytest
from scipy import stats
import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.compiler import building_blocks
from tensorflow_federated.python.core.impl.compiler import tree_analysis

from tff_hdp.aggregators.distributed_group_dp import (
    CohortDistributedGroupDPFactory, DistributedGroupDPFactory)
from tff_hdp.aggregators.heterogeneous_dp import HeterogeneousDPFactory
from tff_hdp.privacy import distributed_noise

pytestmark = pytest.mark.tf

WEIGHT = tff.TensorType(np.float32, [2])


def test_small_noise_gives_the_trusted_rules_mean():
  """Group 0 private (expected count 2), group 1 without guarantee
  (realized count), r = (3, 1), clip 1: the same output as FedHDP's
  trusted factory up to rounding at 16 bits."""
  values = [np.array([1, 0, 0, 0], np.float32),
            np.array([0, 3, 4, 0], np.float32),
            np.array([0, 0, 0.5, -0.25], np.float32)]
  weights = [np.array(w, np.float32) for w in ([1, 0], [1, 0], [0, 1])]
  value_type = tff.TensorType(np.float32, [4])
  distributed = DistributedGroupDPFactory(
      [1e-4, 0.0], [3.0, 1.0], [2.0, None], 1.0, 16, 3,
      release_unprotected_counts=True).create(value_type, WEIGHT)
  trusted = HeterogeneousDPFactory(
      [0.0, 0.0], [3.0, 1.0], [2.0, None], 1.0, clip_learning_rate=0.0,
      expected_clients_per_round=3.0).create(value_type, WEIGHT)
  out = distributed.next(distributed.initialize(), values, weights)
  got = out.result
  np.testing.assert_array_equal(out.measurements['group_client_counts'],
                                [2, 1])
  want = trusted.next(trusted.initialize(), values, weights).result
  w = np.array([6.0, 1.0]) / 7
  by_hand = (w[0] * np.array([1, 0.6, 0.8, 0]) / 2 +
             w[1] * np.array([0, 0, 0.5, -0.25]))
  np.testing.assert_allclose(want, by_hand, atol=1e-6)
  np.testing.assert_allclose(got, want, atol=2e-3)


@pytest.mark.parametrize('mechanism', ['dgauss', 'skellam'])
def test_the_sums_noise_has_the_std_the_accounting_assumes(mechanism):
  """5 clients with zero updates, z = 0.8, clip 0.5: the group's sum is
  its noise alone, std z S over 2000 coordinates and 3 rounds; the
  accounting's D = Delta / (sqrt(n) sigma) is 1/z inflated by rounding
  only."""
  z, clip, n, dim = 0.8, 0.5, 5, 2000
  factory = DistributedGroupDPFactory([z], [1.0], [1.0], clip, 16, n,
                                      mechanism)
  process = factory.create(tff.TensorType(np.float32, [dim]),
                           tff.TensorType(np.float32, [1]))
  state = process.initialize()
  draws = []
  for _ in range(3):
    out = process.next(state, [np.zeros(dim, np.float32)] * n,
                       [np.ones(1, np.float32)] * n)
    state = out.state
    draws.append(np.asarray(out.result))
  std = np.std(np.concatenate(draws))
  # 6000 draws: the sample std is within 3% of the truth with room to spare.
  assert std == pytest.approx(z * clip, rel=0.05)
  [built] = factory.noise(dim)
  scale = built.l2_sensitivity / (math.sqrt(n) * built.local_stddev)
  assert 1 / z < scale < 1.05 / z
  assert built.dim == dim  # TFF's DFT pads an odd dimension by one only


def test_a_group_of_one_device_gets_every_devices_noise_share():
  """5 devices with zero updates, 1 of them in the private group (z 0.8,
  clip 0.5, expected size 1), 4 in the group without guarantee, r = (1, 1):
  the private slot carries all 5 shares, so the output's noise std is the
  group's weight 1 / 5 times z S, as for a group of 5, and not the one
  member's share (sqrt(5) smaller). No group is too small to hide a device
  in its sum."""
  z, clip, n, dim = 0.8, 0.5, 5, 2000
  process = DistributedGroupDPFactory(
      [z, 0.0], [1.0, 1.0], [1.0, None], clip, 16, n,
      release_unprotected_counts=True).create(
          tff.TensorType(np.float32, [dim]), WEIGHT)
  state = process.initialize()
  weights = [np.array([1, 0], np.float32)] + [np.array([0, 1], np.float32)] * 4
  draws = []
  for _ in range(3):
    out = process.next(state, [np.zeros(dim, np.float32)] * n, weights)
    state = out.state
    np.testing.assert_array_equal(out.measurements['group_client_counts'],
                                  [1, 4])
    draws.append(np.asarray(out.result))
  # 6000 draws: the sample std is within 3% of the truth with room to spare.
  assert np.std(np.concatenate(draws)) == pytest.approx(z * clip / 5, rel=0.05)


@pytest.mark.parametrize('bits', [1, 4])
def test_bits_too_few_for_the_clients_are_tffs_error(bits):
  """20 clients: 2^4 < 20 wraps the sum of their shares; 5 bits pass."""
  with pytest.raises(ValueError, match=r'bits should be >= log2'):
    DistributedGroupDPFactory([1.0], [1.0], [1.0], 1.0, bits, 20)
  DistributedGroupDPFactory([1.0], [1.0], [1.0], 1.0, 5, 20)


def test_each_group_sums_at_its_own_bits():
  """Two private groups at 12 and 18 bits, two clients each, aligned
  updates at the clip norm: both sums are the plain sums (no wrap at
  either width), and the 18-bit group's integers are 2^6 times the finer
  (TFF scales them to fit the bits)."""
  dim, clip, n = 64, 0.1, 4
  update = np.random.default_rng(1).normal(size=dim).astype(np.float32)
  update *= clip / np.linalg.norm(update)
  factory = DistributedGroupDPFactory([1e-3, 1e-3], [1.0, 1.0], [2.0, 2.0],
                                      clip, [12, 18], n)
  process = factory.create(tff.TensorType(np.float32, [dim]), WEIGHT)
  weights = [np.array([1, 0] if i < 2 else [0, 1], np.float32)
             for i in range(n)]
  out = process.next(process.initialize(), [update] * n, weights)
  # Each group's mean over its 2 expected clients is `update`; the output
  # weighs the two means equally.
  np.testing.assert_allclose(out.result, update, atol=2e-3)
  coarse, fine = factory.noise(dim)
  # The sensitivity in integers grows with the scale 2^b allows (plus
  # the same rounding inflation, sqrt(64), in both).
  assert fine.l2_sensitivity / coarse.l2_sensitivity == pytest.approx(
      2**6, rel=0.02)


@pytest.mark.parametrize('factory,rows', [
    (DistributedGroupDPFactory, ()), (CohortDistributedGroupDPFactory,
                                      (None,))])
def test_every_aggregation_of_the_clients_is_a_secure_sum(factory, rows):
  """The server learns sums of secure aggregations only: the updates'
  slots, the clip counts and the group counts; no plain federated_sum
  (whose inputs a deployment may show the server) is left, in cohorts
  too."""
  process = factory(
      [1.0, 0.0], [1.0, 1.0], [2.0, None], 1.0, 16, 3).create(
          tff.TensorType(np.float32, [*rows, 3]),
          tff.TensorType(np.float32, [*rows, 2]))
  uris = []
  tree_analysis.visit_postorder(
      process.next.to_building_block(),
      lambda b: uris.append(b.uri) if isinstance(
          b, building_blocks.Intrinsic) else None)
  assert 'federated_secure_sum_bitwidth' in uris
  assert not [u for u in uris if u in ('federated_sum', 'federated_aggregate',
                                       'federated_mean',
                                       'federated_weighted_mean')]


def test_a_group_without_members_sends_no_slot():
  """The opt-out group with no member (group 1 of 2): one secure sum of
  the updates fewer (the private slot's and the counts' remain), and at
  small noise the same output as with its slot; a group with noise cannot
  be declared empty."""
  values = [np.array([1, 0, 0], np.float32), np.array([0, 0.6, 0.8],
                                                      np.float32)]
  weights = [np.array([1, 0], np.float32)] * 2
  value_type = tff.TensorType(np.float32, [3])

  def build(empty):
    return DistributedGroupDPFactory(
        [1e-4, 0.0], [1.0, 1.0], [2.0, None], 1.0, 16, 2,
        groups_without_members=empty).create(value_type, WEIGHT)

  def secure_sums(process):
    uris = []
    tree_analysis.visit_postorder(
        process.next.to_building_block(),
        lambda b: uris.append(b.uri) if isinstance(
            b, building_blocks.Intrinsic) else None)
    return uris.count('federated_secure_sum_bitwidth')

  slotless, full = build((1,)), build(())
  assert secure_sums(slotless) < secure_sums(full)
  for process in (slotless, full):
    out = process.next(process.initialize(), values, weights)
    np.testing.assert_allclose(out.result, [0.5, 0.3, 0.4], atol=2e-3)
  with pytest.raises(ValueError, match='group 0 has noise but no member'):
    build((0,))


def test_a_non_finite_update_adds_zeros_and_its_noise_share():
  """A NaN update is not summed (its slot is zeros, as the trusted rule
  excludes it); the group's sum stays finite and is the finite member's."""
  process = DistributedGroupDPFactory(
      [1e-4], [1.0], [1.0], 1.0, 16, 2).create(
          tff.TensorType(np.float32, [2]), tff.TensorType(np.float32, [1]))
  out = process.next(process.initialize(),
                     [np.array([np.nan, 1], np.float32),
                      np.array([0.6, -0.8], np.float32)],
                     [np.ones(1, np.float32)] * 2)
  np.testing.assert_allclose(out.result, [0.6, -0.8], atol=2e-3)


def test_the_modulus_holds_aligned_updates_at_tffs_wrap_probability():
  """20 equal updates at the clip norm S sum to norm 20 S. After TFF's
  random rotation a coordinate of that sum is about normal with std
  20 S scale / sqrt(d) in the integer domain, and TFF's scale puts the
  modulus 2^15 at k = 3.89 of those stds, where a coordinate wraps with
  probability MODCLIP_PROB = 1e-4 (so 650 coordinates hold at least one
  wrap in about 6% of such rounds: a utility cost, not a privacy one).
  The same updates at half the clip norm sit at 7.8 stds, where a wrap
  has probability about 1e-14 a coordinate, and the output is their plain
  sum to the noise and rounding, where a wrap would be off by about
  2^16 / (scale sqrt(d)) = 0.026."""
  dim, clip, n = 650, 0.1, 20
  factory = DistributedGroupDPFactory([1e-3], [1.0], [1.0], clip, 16, n)
  built = factory.noise(dim)[0]
  stds = 2.0**15 / (n * built.l2_sensitivity / math.sqrt(built.dim))
  assert stds == pytest.approx(
      stats.norm.isf(distributed_noise.MODCLIP_PROB / 2), rel=0.01)
  update = np.random.default_rng(0).normal(size=dim).astype(np.float32)
  update *= 0.5 * clip / np.linalg.norm(update)
  process = factory.create(tff.TensorType(np.float32, [dim]),
                           tff.TensorType(np.float32, [1]))
  out = process.next(process.initialize(), [update] * n,
                     [np.ones(1, np.float32)] * n)
  np.testing.assert_allclose(out.result, n * update, atol=2e-3)

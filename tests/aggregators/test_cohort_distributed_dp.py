"""fedhdp_ddp in cohorts: each stacked row goes through TFF's per-device
distributed-DP steps, so the sums are the clipped rows' plain sums (and
TFF's own per-device process's) up to the rounding TFF's scale allows,
each of K devices adds its own noise share whatever the cohorts, and the
group counts are the realized ones."""

import math

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.aggregators import distributed_group_dp
from tff_hdp.aggregators import tff_distributed_dp
from tff_hdp.aggregators.distributed_group_dp import (
    CohortDistributedGroupDPFactory, DistributedGroupDPFactory)

pytestmark = pytest.mark.tf

# A model of two leaves, 11 parameters (TFF's DFT pads them to 12).
SHAPES = ((3, 2), (5,))
ROW_TYPE = tff.types.to_type([tff.TensorType(np.float32, s) for s in SHAPES])
STACKED_TYPE = tff.types.to_type(
    [tff.TensorType(np.float32, (None,) + s) for s in SHAPES])
DIM, PADDED = 11, 12


def _devices(n, seed):
  """n devices' updates, norms from about 0.3 to 3 (most above clip 1)."""
  rng = np.random.default_rng(seed)
  return [[(rng.normal(size=s) * rng.uniform(0.1, 1)).astype(np.float32)
           for s in SHAPES] for _ in range(n)]


def _cohorts(rows, sizes):
  """`rows` (devices' structures or group vectors) stacked in cohorts."""
  out, start = [], 0
  for size in sizes:
    part = rows[start:start + size]
    start += size
    out.append([np.stack(leaves) for leaves in zip(*part)]
               if isinstance(part[0], list) else np.stack(part))
  return out


def _flat(structure):
  return np.concatenate([np.reshape(x, -1) for x in structure])


def _clipped(update, clip):
  flat = _flat(update)
  return flat * clip / max(clip, np.linalg.norm(flat))


def _scale(factory):
  """The scale TFF's own build for one device holds."""
  state = factory.create(ROW_TYPE).initialize()
  return float(state[0]['inner_agg']['scale_factor'])


@pytest.mark.parametrize('rounding', ['conditional', 'unconditional'])
def test_a_cohort_sum_is_the_clipped_rows_sum_and_tffs_per_device_sum(
    rounding):
  """No noise, 20 bits, 6 devices in cohorts of 4 and 2 (one sending
  zeros), clip 1, either rounding: the sum is the plain sum of the rows
  clipped to 1, and TFF's per-device process's on the same devices, up to
  rounding: each device's integers are off by less than one step 1/s per
  coordinate, so the sum by less than K sqrt(d) / s in L2 (the rotation
  keeps norms)."""
  n, clip = 6, 1.0
  factory = tff_distributed_dp.sum_factory('dgauss', 0.0, n, 20, clip,
                                           rounding)
  # The last as a device outside the group sends.
  devices = _devices(n - 1, seed=0) + [[np.zeros(s, np.float32)
                                        for s in SHAPES]]
  assert sum(np.linalg.norm(_flat(d)) > clip for d in devices) >= 3
  cohort = tff_distributed_dp.CohortDpSumFactory(factory).create(
      STACKED_TYPE)
  got = _flat(cohort.next(cohort.initialize(),
                          _cohorts(devices, [4, 2])).result)
  per_device = factory.create(ROW_TYPE)
  tffs = _flat(per_device.next(per_device.initialize(), devices).result)
  step = math.sqrt(PADDED) * n / _scale(factory)
  plain = np.sum([_clipped(d, clip) for d in devices], axis=0)
  assert np.linalg.norm(plain) > 1000 * step
  assert np.linalg.norm(got - plain) < step
  assert np.linalg.norm(got - tffs) < 2 * step


def test_the_group_factories_agree_and_count_the_realized_groups():
  """Group 0 private (z = 1e-4, expected count 3), group 1 without
  guarantee (realized count), r = (3, 1), 18 bits; 7 devices, one with a
  NaN update (zeros in its slot, its row still counted, as the
  per-device factory counts it) and one with the invalid row [1, 1]
  (excluded): the cohort factory's output is the per-device factory's up
  to rounding and the tiny noise, and both count 4 and 2 devices."""
  n, clip = 7, 1.0
  devices = _devices(n, seed=1)
  devices[2][0][0, 0] = np.nan
  groups = [np.array(g, np.float32) for g in
            ([1, 0], [1, 0], [1, 0], [0, 1], [1, 1], [0, 1], [1, 0])]
  args = ([1e-4, 0.0], [3.0, 1.0], [3.0, None], clip, 18, n)
  per_device = DistributedGroupDPFactory(
      *args, release_unprotected_counts=True).create(
          ROW_TYPE, tff.TensorType(np.float32, [2]))
  cohort_factory = CohortDistributedGroupDPFactory(
      *args, release_unprotected_counts=True)
  cohort = cohort_factory.create(STACKED_TYPE,
                                 tff.TensorType(np.float32, [None, 2]))
  want = per_device.next(per_device.initialize(), devices, groups)
  got = cohort.next(cohort.initialize(), _cohorts(devices, [4, 3]),
                    _cohorts(groups, [4, 3]))
  for out in (want, got):
    np.testing.assert_array_equal(out.measurements['group_client_counts'],
                                  [4, 2])
  w = np.array([9.0, 2.0]) / 11
  by_hand = (w[0] * np.sum([_clipped(devices[i], clip) for i in (0, 1, 6)],
                           axis=0) / 3 +
             w[1] * np.sum([_clipped(devices[i], clip) for i in (3, 5)],
                           axis=0) / 2)
  [built, _] = cohort_factory.noise(DIM)
  scale = _scale(tff_distributed_dp.sum_factory('dgauss', 1e-4, n, 18, clip))
  # Rounding of 7 devices' integers and 7 shares of TFF's least discrete
  # Gaussian (its std rounded up to an integer), in L2.
  tolerance = (n + 5 * math.sqrt(n) * math.ceil(built.local_stddev)) * (
      math.sqrt(PADDED) / scale)
  assert np.linalg.norm(_flat(got.result) - by_hand) < tolerance
  assert np.linalg.norm(_flat(got.result) - _flat(want.result)) < (
      2 * tolerance)
  assert np.linalg.norm(by_hand) > 30 * tolerance


@pytest.mark.parametrize('mechanism', ['dgauss', 'skellam'])
def test_every_device_adds_its_share_whatever_the_cohorts(mechanism):
  """6 devices with zero updates in cohorts of 4 and 2, z = 0.8, clip 0.5,
  16 bits: the group's sum is its noise alone, 6 shares of std z S /
  sqrt(6) (descaled): std z S over 3 rounds of 2000 coordinates. One
  share per cohort would give sqrt(2 / 6) of it."""
  z, clip, n, dim = 0.8, 0.5, 6, 2000
  process = CohortDistributedGroupDPFactory(
      [z], [1.0], [1.0], clip, 16, n, mechanism).create(
          [tff.TensorType(np.float32, [None, dim])],
          tff.TensorType(np.float32, [None, 1]))
  updates = [[np.zeros((k, dim), np.float32)] for k in (4, 2)]
  weights = [np.ones((k, 1), np.float32) for k in (4, 2)]
  state, draws = process.initialize(), []
  for _ in range(3):
    out = process.next(state, updates, weights)
    state = out.state
    draws.append(_flat(out.result))
  # 6000 draws: the sample std is within 3% of the truth with room to spare.
  assert np.std(np.concatenate(draws)) == pytest.approx(z * clip, rel=0.05)


def test_own_group_sums_are_the_clipped_members_sums_without_noise():
  """Groups 0 and 1 private at z = 1e-4 (expected counts 3 and 2), group 2
  without guarantee, 20 bits, r = (2, 1, 1); 7 devices in cohorts of 4
  and 3, one with a NaN update: one slot per device (`slots='own_group'`)
  gives the combined mean of the clipped members' sums, as a slot per
  group does (`test_the_group_factories_agree_and_count_the_realized_
  groups`), up to rounding and the tiny noise, and the same counts."""
  n, clip = 7, 1.0
  devices = _devices(n, seed=2)
  devices[4][1][0] = np.nan
  members = ((0, 2, 4), (1, 5), (3, 6))
  groups = [np.eye(3, dtype=np.float32)[g] for g in (0, 1, 0, 2, 0, 1, 2)]
  process = CohortDistributedGroupDPFactory(
      [1e-4, 1e-4, 0.0], [2.0, 1.0, 1.0], [3.0, 2.0, None], clip, 20, n,
      release_unprotected_counts=True, slots='own_group').create(
          STACKED_TYPE, tff.TensorType(np.float32, [None, 3]))
  own = process.next(process.initialize(), _cohorts(devices, [4, 3]),
                     _cohorts(groups, [4, 3]))
  np.testing.assert_array_equal(own.measurements['group_client_counts'],
                                [3, 2, 2])
  w = np.array([6.0, 2.0, 2.0]) / 10
  by_hand = sum(
      w[j] * np.sum([np.nan_to_num(_clipped(devices[i], clip))
                     if np.all(np.isfinite(_flat(devices[i])))
                     else np.zeros(DIM) for i in rows], axis=0) / len(rows)
      for j, rows in enumerate(members))
  scale = _scale(tff_distributed_dp.sum_factory('dgauss', 1e-4, n, 20, clip))
  # Rounding of 7 devices' integers and up to 7 shares of TFF's least
  # discrete Gaussian (std 1 in the integer domain), in L2.
  tolerance = (n + 5 * math.sqrt(n)) * math.sqrt(PADDED) / scale
  assert np.linalg.norm(_flat(own.result) - by_hand) < tolerance
  assert np.linalg.norm(by_hand) > 30 * tolerance


def _own_group_process(dim, z, clip, mechanism):
  """Group 0's sum (r = (1, 0), D_0 = 1) of two private groups at z, 16
  bits, 6 devices a round, one slot per device."""
  return CohortDistributedGroupDPFactory(
      [z, z], [1.0, 0.0], [1.0, 1.0], clip, 16, 6, mechanism,
      slots='own_group').create([tff.TensorType(np.float32, [None, dim])],
                                tff.TensorType(np.float32, [None, 2]))


def _own_group_round(updates, groups):
  """One round's inputs: the 6 devices in cohorts of 4 and 2."""
  one_hot = np.eye(2, dtype=np.float32)[groups]
  return [[updates[:4]], [updates[4:]]], [one_hot[:4], one_hot[4:]]


@pytest.mark.parametrize('mechanism,members', [('dgauss', 2),
                                               ('skellam', 4)])
def test_own_group_members_alone_add_the_groups_noise(mechanism, members):
  """Zero updates, z = 0.8, clip 0.5, 6 devices of which `members` are in
  group 0: its sum is its noise alone, `members` shares of std
  z S / sqrt(members), std z S (descaled) over 3 rounds of 2000
  coordinates, as TFF's K shares give. If the other devices added shares
  too, the std would be z S sqrt(6 / members). Then a round with one
  device of group 0 (fewer than `MIN_MEMBERS`), its update far from
  zero: group 0's sum is exactly zero, its update and noise withheld."""
  z, clip, dim = 0.8, 0.5, 2000
  process = _own_group_process(dim, z, clip, mechanism)
  inputs = _own_group_round(np.zeros((6, dim), np.float32),
                            [0] * members + [1] * (6 - members))
  state, draws = process.initialize(), []
  for _ in range(3):
    out = process.next(state, *inputs)
    state = out.state
    draws.append(_flat(out.result))
  assert np.std(np.concatenate(draws)) == pytest.approx(z * clip, rel=0.05)
  assert distributed_group_dp.MIN_MEMBERS == 2
  alone = process.next(state, *_own_group_round(
      np.full((6, dim), 0.3, np.float32), [0, 1, 1, 1, 1, 1]))
  np.testing.assert_array_equal(_flat(alone.result), np.zeros(dim))


def test_one_slot_needs_cohorts():
  """TFF's per-device factory adds every client's share to every sum:
  `slots='own_group'` is refused there, naming what runs it."""
  with pytest.raises(ValueError, match='only cohorts send one slot'):
    DistributedGroupDPFactory([1.0], [1.0], [1.0], 1.0, 16, 6,
                              slots='own_group')
  with pytest.raises(ValueError, match="got 'one'"):
    CohortDistributedGroupDPFactory([1.0], [1.0], [1.0], 1.0, 16, 6,
                                    slots='one')

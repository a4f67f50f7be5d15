"""Each privacy group's sum through TFF's distributed discrete noise.

Clients do not trust the server with their updates: group j's sum goes
through TFF's `DistributedDpSumFactory` (`distributed_dgauss` or
`distributed_skellam`: every client clips, rotates, scales and rounds its
update to integers (conditionally by default: see `tff_distributed_dp.
ROUNDING`), adds its share of discrete Gaussian or Skellam noise,
std z_j S / sqrt(K) before scaling, and the shares meet in
`SecureSumFactory`'s modular sum of the group's b_j bits), so the server sees
only the noisy group sums. A group without guarantee is clipped and summed
by `SecureSumFactory` without noise. The sums are combined as
`PerGroupStreamsFactory` combines them (group j's mean over its expected
count D_j, weights r_j n_j).

Every client sends a slot per group (its update in its own group's, zeros
elsewhere) and adds a noise share to every private group's slot: K shares
per sum, K the clients per round, l slots of traffic and (private groups)
noise shares per client. A group without guarantee that has no member in
the population (`groups_without_members`: the opt-out group when nobody
opts out) has no slot. The groups' counts (a group without guarantee
divides by its realized one) go through a secure sum too, so the server
learns the noisy group sums and how many clients each group has in the
round, not which group a client is in. In simulation TFF's secure sums
run as the plain sums of the modular integers; the cryptography is TFF's
executor's business, not this module's.

With `slots='own_group'` (cohorts only) the server learns each device's
group instead: a private group's sum is over its members only, each
member adding one noise share of std z_j S / sqrt(c_j), c_j the group's
count in the round (which the server learns and announces), so the sum
carries the same noise as K shares would, with one slot and one share of
traffic per device (a group without guarantee, summed without noise,
is then a sum over its members too: the other devices' zeros add
nothing). A round with fewer than `MIN_MEMBERS` of a private group's
members reveals nothing of that group (`tff_distributed_dp.
CohortDpSumFactory`'s threshold). TFF's per-device factory adds every
client's share to every sum, so the per-device path has no such variant.

`CohortDistributedGroupDPFactory` is the same for cohorts (`tff_hdp.
learning.cohort`): a TFF client holds K devices' stacked updates, and
every row goes through TFF's per-device steps, its own noise share in
every private slot included, before the cohort adds the rows' integers
(`tff_distributed_dp.CohortDpSumFactory`): the same sums, counts and K
noise shares per sum as from K separate TFF clients.

`noise` reads, from the process TFF builds for a model of `dim`
parameters, what each private group's accounting needs
(`tff_hdp.privacy.distributed_noise`): the inflated sensitivities and
local std in the integer domain, and the padded dimension, as TFF computed
them (`tff_hdp.aggregators.tff_distributed_dp`, the one module that reads
TFF's internal names).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.aggregators import heterogeneous_dp
from tff_hdp.aggregators import per_group_streams
from tff_hdp.aggregators import stacking
from tff_hdp.aggregators import tff_distributed_dp
from tff_hdp.privacy import min_separation
from tff_hdp.privacy.distributed_noise import MIN_MEMBERS


# What a device sends: a slot per group, or its own group's only.
SLOTS = ('every_group', 'own_group')


class DistributedGroupDPFactory(per_group_streams.PerGroupStreamsFactory):
  """Per-group distributed DP sums combined with weights r_j (see the
  module docstring); the client weight is the float32[l] one-hot group
  vector."""

  # The slots this factory's clients can send.
  _SLOTS = SLOTS[:1]

  def __init__(self, noise_multipliers: Sequence[float],
               ratios: Sequence[float],
               expected_group_sizes: Sequence[float | None],
               clip: float, bits: int | Sequence[int],
               clients_per_round: int, mechanism: str = 'dgauss',
               release_unprotected_counts: bool = False,
               groups_without_members: Sequence[int] = (),
               rounding: str = 'conditional',
               slots: str = 'every_group') -> None:
    """Args:
      noise_multipliers: z_j per group (0: a group without guarantee, summed
        securely without noise).
      ratios: r_j per group.
      expected_group_sizes: D_j per group, or None for the realized count.
      clip: the clip norm S (fixed).
      bits: each group's secure sum's bit width (TFF's `bits`), or one for
        every group (a group without guarantee's is not read).
      clients_per_round: K, the clients adding noise shares to each sum.
      mechanism: the noise, 'dgauss' (discrete Gaussian) or 'skellam'.
      release_unprotected_counts: as `PerGroupStreamsFactory`'s.
      groups_without_members: groups without guarantee (z 0) with no member
        in the population: no slot, weight 0.
      rounding: TFF's rounding to integers, 'conditional' or
        'unconditional' (`tff_distributed_dp.ROUNDING`).
      slots: `SLOTS`: 'every_group' (a slot per group; the server does not
        learn a device's group) or 'own_group' (cohorts only: one slot;
        the server learns the groups).

    Raises:
      ValueError: inconsistent settings, or TFF's checks of bits, clients
        and noise.
    """
    if not clip > 0:
      raise ValueError(f'clip must be > 0, got {clip}.')
    if slots not in self._SLOTS:
      raise ValueError(f'slots must be one of {self._SLOTS}, got {slots!r}' +
                       ('' if slots not in SLOTS else ': TFF\'s per-device '
                        'factory adds every client\'s noise share to every '
                        'sum, so only cohorts send one slot') + '.')
    self._own_group = slots == 'own_group'
    if isinstance(bits, int):
      bits = [bits] * len(noise_multipliers)
    if len(bits) != len(noise_multipliers):
      raise ValueError(f'{len(bits)} bit widths for {len(noise_multipliers)} '
                       'groups.')
    self._distributed = [
        tff_distributed_dp.sum_factory(mechanism, z, clients_per_round, b,
                                       clip, rounding) if z > 0 else None
        for z, b in zip(noise_multipliers, bits)]
    for j in groups_without_members:
      if noise_multipliers[j] > 0:
        raise ValueError(f'group {j} has noise but no member: leave it out of '
                         'the groups.')
    streams = [None if j in groups_without_members
               else self._plain_stream(clip, clients_per_round) if f is None
               else self._private_stream(f)
               for j, f in enumerate(self._distributed)]
    super().__init__(streams, ratios, expected_group_sizes,
                     [z * clip for z in noise_multipliers], clip,
                     release_unprotected_counts)
    # Enough bits for a round's count of any group.
    self._count_bits = int(clients_per_round).bit_length() + 1
    self._noised = tuple(z > 0 for z in noise_multipliers)

  def _private_stream(self, factory):
    """A private group's sum: TFF's distributed-DP sum `factory`."""
    return factory

  def _plain_stream(self, clip: float, clients_per_round: int):
    """A group without guarantee's sum: clipped, securely summed."""
    del clients_per_round
    return tff.aggregators.clipping_factory(
        clip, tff.aggregators.SecureSumFactory(clip, -clip),
        clipped_count_sum_factory=tff.aggregators.SecureSumFactory(1, 0))

  def noise_strategies(self, rounds: int) -> tuple:
    """Fresh noise every round for each group with noise (TFF's secure
    sums hold no noise state), None for a group without guarantee."""
    del rounds
    return tuple(min_separation.IndependentNoise() if noised else None
                 for noised in self._noised)

  def _sum_counts(self, rows):
    """The group counts through a secure sum: the server learns how many
    clients each group has in the round, not which."""
    rows_type = rows.type_signature.member

    @tff.tensorflow.computation(rows_type)
    def as_integers(row):
      return tf.cast(row, tf.int32)

    @tff.tensorflow.computation(tff.TensorType(np.int32, rows_type.shape))
    def as_floats(count):
      return tf.cast(count, tf.float32)

    return tff.federated_map(as_floats, tff.federated_secure_sum_bitwidth(
        tff.federated_map(as_integers, rows), self._count_bits))

  def noise(self, dim: int) -> list[tff_distributed_dp.BuiltNoise | None]:
    """`tff_distributed_dp.built_noise` of each private group's sum for a
    model of `dim` parameters (None for a group without guarantee)."""
    return [None if f is None else tff_distributed_dp.built_noise(f, dim)
            for f in self._distributed]


class _CohortSecureSum(tff.aggregators.UnweightedAggregationFactory):
  """A cohort's sum of its rows (each clipped to S) through
  `SecureSumFactory`, each coordinate within +-`bound`."""

  def __init__(self, bound: float) -> None:
    self._bound = float(bound)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    inner = tff.aggregators.SecureSumFactory(
        self._bound, -self._bound).create(stacking.row_type(value_type))

    @tff.tensorflow.computation(value_type)
    def add_rows(rows):
      return tf.nest.map_structure(lambda x: tf.reduce_sum(x, axis=0), rows)

    @tff.federated_computation(inner.initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      return inner.next(state, tff.federated_map(add_rows, value))

    return tff.templates.AggregationProcess(inner.initialize, next_fn)


class CohortDistributedGroupDPFactory(DistributedGroupDPFactory):
  """`DistributedGroupDPFactory` for cohorts (`tff_hdp.learning.cohort`):
  a TFF client holds K devices' updates stacked and their [K, l] group
  rows. Group j's slot of the cohort is the stacked rows with every
  non-member row zeroed (each row clipped to S first, a non-finite row
  zeroed, as `CohortPerGroupStreamsFactory` clips); a private group's
  `tff_distributed_dp.CohortDpSumFactory` then runs every row through TFF's
  per-device steps, its own noise share included, before the cohort adds
  them: the server receives the same noisy group sums, with the same K
  noise shares, as from K separate TFF clients. A group without guarantee
  sums the cohort's rows into one secure sum, each coordinate within
  K S."""

  _ROWS = (None,)
  _SLOTS = SLOTS

  def _private_stream(self, factory):
    return tff_distributed_dp.CohortDpSumFactory(factory, self._own_group,
                                                 MIN_MEMBERS)

  def _plain_stream(self, clip: float, clients_per_round: int):
    return _CohortSecureSum(clip * clients_per_round)

  def _member(self, value, one_hot, j):
    rows = heterogeneous_dp.valid_group_rows(one_hot)[:, j] > 0
    clipped, _ = clipping.clip_rows(tf.nest.flatten(value), self._clip)
    member = tf.nest.pack_sequence_as(
        value, [clipping.zero_rows(x, rows) for x in clipped])
    # One slot: the private group's stream learns its members.
    return (member, rows) if self._own_group and self._noised[j] else member

  def _counts(self, one_hot):
    return tf.reduce_sum(heterogeneous_dp.valid_group_rows(one_hot), axis=0)

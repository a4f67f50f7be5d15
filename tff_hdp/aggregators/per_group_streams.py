"""Each privacy group's sum through a DP sum factory of its own, the group
means combined as FedHDP combines them.

Without sampling (`tff_hdp.privacy.min_separation`), a group's privacy comes
from noise correlated over rounds, and that noise lives in the state of the
factory that adds it (BLT's buffers, the tree's nodes). So each group gets a
stream: group j's members' updates (every other client sends zeros) go
through `group_factories[j]`, an unweighted factory that clips each update
and adds the group's noise (`BltSumFactory`, or TFF's
`DifferentiallyPrivateFactory.tree_aggregation`), and its sum is divided by
the group's expected count D_j (public), or by its realized count for a
group without guarantee. The means are combined with w_j = r_j n_j /
sum_k r_k n_k, n_j the same count as D_j, as `HeterogeneousDPFactory` does.
A group with no member in the population (the opt-out group when nobody
opts out) may have no stream (its factory None): no client sends it a slot,
and its weight is 0 whatever a round's count says.

A client's weight is its float32 one-hot group vector; a row that is not
one-hot (or a zero row, e.g. after a non-finite update) sends zeros to every
stream, and so does a non-finite update (as the cohorts' clipping zeroes
it). The clip is each stream's own and fixed: correlated noise is
calibrated to one sensitivity for the whole run.

`CohortPerGroupStreamsFactory` is the same for cohorts (`tff_hdp.learning.
cohort`): a TFF client holds K devices' updates stacked and their [K, l]
group rows; each row is clipped on its own at CLIENTS (as
`CohortHeterogeneousDPFactory` clips) and group j's clipped rows summed, so
its streams must add noise without clipping again (`BltSumFactory(...,
clip_updates=False)`, a plain sum for a group without guarantee): the
server receives the same group sums as from K separate TFF clients.
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.aggregators import heterogeneous_dp


def _validate(group_factories, ratios, expected_group_sizes,
              noise_stddevs) -> None:
  l = len(group_factories)
  if l < 1:
    raise ValueError('at least one privacy group is needed.')
  if not len(ratios) == len(expected_group_sizes) == len(noise_stddevs) == l:
    raise ValueError(
        f'{l} group factories, {len(ratios)} ratios, '
        f'{len(expected_group_sizes)} expected group sizes and '
        f'{len(noise_stddevs)} noise stds: one each per privacy group.')
  if all(f is None for f in group_factories):
    raise ValueError('every group factory is None: no group has a stream.')
  for j, f in enumerate(group_factories):
    if f is not None and not isinstance(
        f, tff.aggregators.UnweightedAggregationFactory):
      raise TypeError(f'group {j}: the factory must be a tff.aggregators.'
                      'UnweightedAggregationFactory, got '
                      f'{type(f).__name__}.')
  for j, r in enumerate(ratios):
    if not np.isfinite(r) or r < 0:
      raise ValueError(f'group {j}: ratio r must be >= 0, got {r}.')
  for j, d in enumerate(expected_group_sizes):
    if d is not None and not d > 0:
      raise ValueError(f'group {j}: expected group size must be > 0, got '
                       f'{d}.')
  for j, s in enumerate(noise_stddevs):
    if not np.isfinite(s) or s < 0:
      raise ValueError(f'group {j}: noise std must be >= 0, got {s}.')


class PerGroupStreamsFactory(tff.aggregators.WeightedAggregationFactory):
  """Per-group noisy sums from per-group factories, combined with weights
  r_j (see the module docstring).

  As `HeterogeneousDPFactory`, it releases only what the groups' epsilon
  covers: a group with noise (noise std > 0) has its `group_client_counts`
  entry, an exact count, read NaN unless `release_unprotected_counts`.
  """

  def __init__(self,
               group_factories: Sequence[
                   tff.aggregators.UnweightedAggregationFactory | None],
               ratios: Sequence[float],
               expected_group_sizes: Sequence[float | None],
               noise_stddevs: Sequence[float],
               clip: float,
               release_unprotected_counts: bool = False) -> None:
    """Args:
      group_factories: group j's clipped, noised sum; None for a group
        with no member in the population (no stream; weight 0).
      ratios: r_j per group.
      expected_group_sizes: D_j per group, or None for the realized count
        (a group without guarantee).
      noise_stddevs: the std of the noise each group's factory adds to a
        round's sum (reported per round, divided by D_j).
      clip: the streams' clip norm (reported per round).
      release_unprotected_counts: report the exact counts of groups with
        noise instead of NaN (outside every guarantee).

    Raises:
      ValueError, TypeError: inconsistent or out-of-range settings.
    """
    _validate(group_factories, ratios, expected_group_sizes, noise_stddevs)
    if not clip > 0:
      raise ValueError(f'clip must be > 0, got {clip}.')
    self._factories = list(group_factories)
    self._slots = [j for j, f in enumerate(self._factories) if f is not None]
    self._r = np.asarray(ratios, np.float32)
    self._fixed = np.array([d is not None for d in expected_group_sizes])
    self._d = np.array([0.0 if d is None else d for d in expected_group_sizes],
                       np.float32)
    self._noise = np.asarray(noise_stddevs, np.float32)
    self._clip = float(clip)
    self._withheld_counts = (self._noise > 0) & (
        not release_unprotected_counts)

  # A weight is one group row ([l]); a cohort's, one per device ([None, l]).
  _ROWS = ()

  @property
  def num_groups(self) -> int:
    return len(self._factories)

  def noise_strategies(self, rounds: int) -> tuple:
    """Each group's stream's noise strategy over `rounds` rounds (its
    `noise_strategy`; None for a stream that names none, e.g. a plain sum),
    which the run checks against what its plan accounts
    (`tff_hdp.learning.correlated_noise.check_applied_noise`)."""
    return tuple(f.noise_strategy(rounds) if hasattr(f, 'noise_strategy')
                 else None for f in self._factories)

  @property
  def slots(self) -> tuple[int, ...]:
    """The groups with a stream, each a slot every client sends a round
    (a group with no member has none)."""
    return tuple(self._slots)

  def _member(self, value, one_hot, j):
    """What client `value` sends to group `j`'s stream: its update if it is
    a member and finite, zeros otherwise (TFF's tree would clip a NaN to
    NaN and carry it in its nodes for the rest of the run)."""
    inside = tf.logical_and(
        heterogeneous_dp.valid_group_rows(one_hot)[j] > 0,
        clipping.all_finite(value))
    return clipping.zero_unless(inside, value)

  def _counts(self, one_hot):
    return heterogeneous_dp.valid_group_rows(one_hot)

  def _sum_counts(self, rows):
    """The round's group counts from the clients' `rows` (float32[l])."""
    return tff.federated_sum(rows)

  def create(self, value_type: tff.types.Type,
             weight_type: tff.types.Type) -> tff.templates.AggregationProcess:
    """The process for updates of `value_type`, weighted by float32[l]
    one-hot group vectors.

    Raises:
      TypeError: `weight_type` is not the group vector.
    """
    value_type = tff.types.to_type(value_type)
    weight_type = tff.types.to_type(weight_type)
    l = self.num_groups
    expected_weight = tff.TensorType(np.float32, [*self._ROWS, l])
    if not weight_type.is_equivalent_to(expected_weight):
      raise heterogeneous_dp.weight_type_error(
          f'the one-hot privacy-group vector {expected_weight}', weight_type)

    def member_of(j):
      @tff.tensorflow.computation(value_type, weight_type)
      def member(value, one_hot):
        return self._member(value, one_hot, j)
      return member

    slots = self._slots
    members = [member_of(j) for j in slots]
    streams = [self._factories[j].create(m.type_signature.result)
               for j, m in zip(slots, members)]
    template = tff.types.structure_from_tensor_type_tree(
        lambda t: None, streams[0].next.type_signature.result.result.member)
    has_slot = np.isin(np.arange(l), slots)

    @tff.tensorflow.computation(weight_type)
    def group_row(one_hot):
      return self._counts(one_hot)

    sum_types = [s.next.type_signature.result.result.member for s in streams]
    counts_type = tff.TensorType(np.float32, [l])

    @tff.tensorflow.computation(sum_types, counts_type)
    def combine(sums, counts):
      denominators = tf.where(tf.constant(self._fixed), tf.constant(self._d),
                              counts)
      weights = tf.constant(self._r * has_slot) * denominators
      weights = tf.math.divide_no_nan(weights, tf.reduce_sum(weights))
      leaves = [tf.nest.flatten(s) for s in sums]
      combined = [
          tf.add_n([weights[j] * tf.math.divide_no_nan(leaves[k][i],
                                                       denominators[j])
                    for k, j in enumerate(slots)])
          for i in range(len(leaves[0]))]
      measurements = collections.OrderedDict(
          clip_norm=tf.constant(self._clip, tf.float32),
          group_client_counts=heterogeneous_dp.withhold(
              counts, self._withheld_counts),
          group_weights=weights,
          group_noise_stddev=tf.math.divide_no_nan(tf.constant(self._noise),
                                                   denominators))
      return tf.nest.pack_sequence_as(template, combined), measurements

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip([s.initialize() for s in streams])

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      outputs = [s.next(state[k], tff.federated_map(members[k],
                                                     (value, weight)))
                 for k, s in enumerate(streams)]
      counts = self._sum_counts(tff.federated_map(group_row, weight))
      result, measurements = tff.federated_map(
          combine, (tff.federated_zip([o.result for o in outputs]), counts))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip([o.state for o in outputs]), result,
          measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)


class CohortPerGroupStreamsFactory(PerGroupStreamsFactory):
  """`PerGroupStreamsFactory` for cohorts (see the module docstring)."""

  _ROWS = (None,)

  def _member(self, value, one_hot, j):
    rows = heterogeneous_dp.valid_group_rows(one_hot)[:, j]
    clipped, _ = clipping.clip_rows(tf.nest.flatten(value), self._clip)
    return tf.nest.pack_sequence_as(
        value, [tf.tensordot(rows, x, [[0], [0]]) for x in clipped])

  def _counts(self, one_hot):
    return tf.reduce_sum(heterogeneous_dp.valid_group_rows(one_hot), axis=0)

"""Privacy groups merged before a group-weighted factory: one noisy sum for
several groups.

Individualized sampling (`plans.plan_individualized_sampling`) gives every
private client the same noise multiplier z; its groups differ only in how
often their members are sampled. Their sums then need one noise draw, not
one per group: l independent draws of std z S add sqrt(l) times the noise
of the single draw that protects each of their members alike.
`MergedGroupsFactory` maps each client's one-hot group vector (length l) to
the merged groups' (length m) and hands the update to an inner factory
weighted by the float32[m] one-hot vector, e.g. `HeterogeneousDPFactory`
with one private group. With `scales`, group j's rows enter the merged
group at a_j in (0, 1] instead of 1 (the frontier's plans: each group's
clipped sum times a_j before the one draw), for an inner factory that takes
scaled rows (`HeterogeneousDPFactory(scaled_rows=True)`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import heterogeneous_dp


def _validate(inner, merged_group_of, scales) -> None:
  if not isinstance(inner, tff.aggregators.WeightedAggregationFactory):
    raise TypeError('the inner factory must be a tff.aggregators.'
                    f'WeightedAggregationFactory, got {type(inner).__name__}.')
  if not merged_group_of:
    raise ValueError('at least one privacy group is needed.')
  if scales is not None:
    if len(scales) != len(merged_group_of):
      raise ValueError(f'{len(scales)} scales for {len(merged_group_of)} '
                       'privacy groups: one each is needed.')
    if not all(0 < a <= 1 for a in scales):
      raise ValueError(f'each scale must be in (0, 1], got {list(scales)}.')
    if not getattr(inner, 'scaled_rows', False) and any(
        a != 1 for a in scales):
      raise ValueError('scales below 1 need an inner factory that takes '
                       'scaled rows (HeterogeneousDPFactory(scaled_rows='
                       'True)); any other would exclude those clients.')
  merged = sorted(set(merged_group_of))
  if merged != list(range(len(merged))):
    raise ValueError(f'merged groups must be numbered 0..m-1 with none '
                     f'empty, got {list(merged_group_of)}.')


class MergedGroupsFactory(tff.aggregators.WeightedAggregationFactory):
  """Group j's clients aggregated as members of merged group
  `merged_group_of[j]` by `inner`.

  The weight is the float32[l] one-hot group vector (cohorts: [None, l]);
  a row that is not one-hot or zeros is zeroed first
  (`heterogeneous_dp.valid_group_rows`), as the unmerged factory would
  exclude it, so no merge can turn an invalid weight into a valid one. The
  state and measurements are the inner process's (per merged group).
  """

  def __init__(self, inner: tff.aggregators.WeightedAggregationFactory,
               merged_group_of: Sequence[int],
               scales: Sequence[float] | None = None) -> None:
    _validate(inner, merged_group_of, scales)
    self._inner = inner
    self._merged_group_of = tuple(int(m) for m in merged_group_of)
    self._scales = (tuple(float(a) for a in scales) if scales is not None
                    else (1.0,) * len(self._merged_group_of))

  @classmethod
  def private_together(cls, inner: tff.aggregators.WeightedAggregationFactory,
                       private: Sequence[bool]) -> MergedGroupsFactory:
    """Every private group in merged group 0, each non-private group in one
    of its own after it, in order."""
    merged, others = [], 1
    for is_private in private:
      merged.append(0 if is_private else others)
      others += not is_private
    if 0 not in merged:
      raise ValueError('merging the private groups needs at least one.')
    return cls(inner, merged)

  @property
  def num_groups(self) -> int:
    return len(self._merged_group_of)

  def noise_strategies(self, rounds: int) -> tuple | None:
    """Each group's noise strategy: its merged group's in `inner`'s
    `noise_strategies` (None if `inner` names none), which the run checks
    against what its plan accounts
    (`tff_hdp.learning.correlated_noise.check_applied_noise`)."""
    if not hasattr(self._inner, 'noise_strategies'):
      return None
    merged = self._inner.noise_strategies(rounds)
    return tuple(merged[m] for m in self._merged_group_of)

  def create(self, value_type: tff.types.Type,
             weight_type: tff.types.Type) -> tff.templates.AggregationProcess:
    """The inner process for the merged groups' vectors.

    Args:
      value_type: the TFF type of a client's update.
      weight_type: float32[l] or float32[None, l], l the groups before the
        merge.

    Returns:
      A `tff.templates.AggregationProcess` with the inner process's state
      and measurements.

    Raises:
      TypeError: a weight that is not the l groups' vector.
    """
    weight_type = tff.types.to_type(weight_type)
    l = self.num_groups
    if not (isinstance(weight_type, tff.TensorType) and
            weight_type.dtype == np.float32 and
            len(weight_type.shape) in (1, 2) and weight_type.shape[-1] == l):
      raise heterogeneous_dp.weight_type_error(
          f'the float32 one-hot vector of the {l} privacy groups',
          weight_type)
    m = max(self._merged_group_of) + 1
    # Each scale as the largest float32 at or below it: never more
    # sensitivity than planned.
    scales = np.array(self._scales, np.float32)
    scales = np.where(scales > np.array(self._scales),
                      np.nextafter(scales, np.float32(0)), scales)
    merge = (np.eye(m, dtype=np.float32)[list(self._merged_group_of)] *
             scales[:, np.newaxis])
    merged_type = tff.TensorType(np.float32, [*weight_type.shape[:-1], m])
    inner = self._inner.create(value_type, merged_type)

    @tff.tensorflow.computation(weight_type)
    def merged_weight(one_hot):
      rows = tf.reshape(heterogeneous_dp.valid_group_rows(one_hot), [-1, l])
      return tf.reshape(tf.matmul(rows, tf.constant(merge)),
                        tf.concat([tf.shape(one_hot)[:-1], [m]], 0))

    @tff.federated_computation(
        inner.next.type_signature.parameter[0],
        tff.FederatedType(value_type, tff.CLIENTS),
        tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      return inner.next(state, value, tff.federated_map(merged_weight, weight))

    return tff.templates.AggregationProcess(inner.initialize, next_fn)

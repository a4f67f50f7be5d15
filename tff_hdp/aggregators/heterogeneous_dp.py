"""Group-wise DP mean with adaptive clipping: the FedHDP server rule.

SPEC.md §1 steps 3-5. Each client's weight is its privacy-group membership as a
one-hot vector, so one `tff.aggregators.WeightedAggregationFactory` serves any
number of groups: the weights give the per-group sums and realized counts, and
the update itself stays a plain model delta.

TFF's `DifferentiallyPrivateFactory` cannot be reused per group: it is
unweighted, has a single query, and its noise comes from unseeded
`tf.random.normal`. Here the noise is drawn with stateless RNG from a seed kept
in the aggregator state, so a resumed run reproduces an uninterrupted one bit
for bit. The clip-norm update follows TF Privacy's `QuantileEstimatorQuery`
exactly (centred bits, clamped fraction, geometric step).
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.aggregators import clipping
from tff_hdp.privacy import dp_randomness
from tff_hdp.privacy import plans


def _validate(noise_multipliers, ratios, expected_group_sizes,
              initial_clip_norm, target_unclipped_quantile, clip_learning_rate,
              clip_count_stddev, expected_clients_per_round):
  l = len(noise_multipliers)
  if l < 1:
    raise ValueError('at least one privacy group is needed.')
  if len(ratios) != l or len(expected_group_sizes) != l:
    raise ValueError(
        f'{l} noise multipliers, {len(ratios)} ratios and '
        f'{len(expected_group_sizes)} expected group sizes: one each per '
        'privacy group is needed.')
  for j, z in enumerate(noise_multipliers):
    if not np.isfinite(z) or z < 0:
      raise ValueError(f'group {j}: noise multiplier must be >= 0, got {z}.')
  for j, r in enumerate(ratios):
    if not np.isfinite(r) or r < 0:
      raise ValueError(f'group {j}: ratio r must be >= 0, got {r}.')
  for j, d in enumerate(expected_group_sizes):
    if d is not None and not d > 0:
      raise ValueError(
          f'group {j}: expected group size (fixed denominator) must be > 0, '
          f'got {d}.')
  if not initial_clip_norm > 0:
    raise ValueError(f'initial clip norm must be > 0, got {initial_clip_norm}.')
  if not 0 <= target_unclipped_quantile <= 1:
    raise ValueError('target unclipped quantile must be in [0, 1], got '
                     f'{target_unclipped_quantile}.')
  if clip_learning_rate < 0:
    raise ValueError(
        f'clip learning rate must be >= 0, got {clip_learning_rate}.')
  if clip_count_stddev < 0:
    raise ValueError(
        f'clip-count noise stddev must be >= 0, got {clip_count_stddev}.')
  if (clip_learning_rate > 0 and clip_count_stddev == 0 and
      any(z > 0 for z in noise_multipliers)):
    raise ValueError(
        'adaptive clipping (clip learning rate > 0) with private groups needs '
        'clip-count noise > 0; without it the clip norm leaks private '
        "clients' update norms.")
  if expected_clients_per_round is not None and not expected_clients_per_round > 0:
    raise ValueError('expected clients per round must be > 0, got '
                     f'{expected_clients_per_round}.')


def valid_group_rows(one_hot: tf.Tensor, scaled: bool = False) -> tf.Tensor:
  """`one_hot` (a [l] group vector, or [K, l] rows) with every row that is
  not a one-hot vector or zeros set to zeros: the weight is the client's
  sensitivity, so [2, 0] would double its contribution and [1, 1] count it
  in two groups; such a client is excluded instead. With `scaled`, a row's
  one nonzero entry may be any a in (0, 1]: the client's clipped update
  enters its group's sum times a (sensitivity a S, never above S)."""
  rows = tf.reshape(one_hot, [-1, tf.shape(one_hot)[-1]])
  if scaled:
    within = tf.reduce_all(tf.logical_and(rows >= 0.0, rows <= 1.0), axis=1)
    valid = tf.logical_and(within, tf.math.count_nonzero(rows, axis=1) <= 1)
  else:
    binary = tf.reduce_all(tf.logical_or(tf.equal(rows, 0.0),
                                         tf.equal(rows, 1.0)), axis=1)
    valid = tf.logical_and(binary, tf.reduce_sum(rows, axis=1) <= 1.0)
  return tf.reshape(clipping.zero_rows(rows, valid), tf.shape(one_hot))


def weight_type_error(expected: str, got: tff.Type) -> TypeError:
  """The error for a weight that is not `expected` (the group vector); a
  scalar is what TFF's stock builders pass, so it then names the builder
  that passes the group vector."""
  hint = ('; TFF\'s build_weighted_fed_avg passes a float32 scalar weight: '
          'build the process with tff_hdp.learning.group_fed_avg.'
          'build_group_weighted_fed_avg' if isinstance(got, tff.TensorType)
          and got.shape is not None and not got.shape else '')
  return TypeError(f'the weight must be {expected}, got {got}{hint}.')


def withhold(value: tf.Tensor, withheld) -> tf.Tensor:
  """`value` with NaN where `withheld` (a bool, or one per entry): an exact
  count no noise protects is reported as NaN, so the measurement keeps its
  type and releases nothing."""
  return tf.where(tf.constant(withheld), tf.fill(tf.shape(value), np.nan),
                  value)


class HeterogeneousDPFactory(tff.aggregators.WeightedAggregationFactory):
  """Per-group noisy means combined with weights r_j, one shared clip norm.

  The `weight` of each client is a float32 one-hot vector of length l naming
  its privacy group (a zero vector excludes the client, e.g. after a
  non-finite update). Per round, with current clip norm S:

  * every client update is clipped to S and its bit `b = ||Delta|| <= S` kept
    (a zero update keeps none: `clipping.centred_clip_bits`);
  * group j's mean is `(sum of its clipped updates + N(0, (z_j S)^2 I)) / D_j`,
    with `D_j` the expected group size when given (fixed denominator) or the
    realized count otherwise;
  * the group means are combined with `w_j = r_j n_j / sum_k r_k n_k`, where
    `n_j` is the same count as `D_j`; a realized-count group that is empty gets
    weight 0;
  * `S <- S exp(-eta_b (clamp(b_bar) - kappa))` with `b_bar` the noisy fraction
    of unclipped clients (noise std z_b on the centred count).

  With all noise multipliers 0 and realized denominators this is clipped
  FedAvg; with one group and a fixed denominator it is TFF's DP-FedAvg with
  adaptive clipping.

  The clients' clipped contributions (group sums, counts, clip bits) are
  summed by an inner `value_sum_factory` (`tff.aggregators.SumFactory` by
  default), as TFF's own factories do, so secure aggregation can be composed
  underneath; the DP noise is added to its result at the server, so the inner
  sum must be exact (or keep each client's contribution within the clip).

  Its measurements release only what the groups' epsilon covers: a realized
  count of a group with noise (z_j > 0) is exact in private data, so by
  default such a group's `group_client_counts` entry, `num_clients` (when
  any group has noise) and, with a fixed clip norm, the clipped fraction (a
  count no noise then protects) read NaN. `release_unprotected_counts=True`
  reports them exact, outside every guarantee. A realized denominator for a
  group with noise makes its mean itself depend on its exact count: no
  epsilon covers that run at all.
  """

  def __init__(self,
               noise_multipliers: Sequence[float],
               ratios: Sequence[float],
               expected_group_sizes: Sequence[float | None],
               initial_clip_norm: float,
               target_unclipped_quantile: float = 0.5,
               clip_learning_rate: float = 0.2,
               clip_count_stddev: float = 0.0,
               expected_clients_per_round: float | None = None,
               seed: int = 0,
               value_sum_factory: (tff.aggregators.UnweightedAggregationFactory
                                   | None) = None,
               release_unprotected_counts: bool = False,
               scaled_rows: bool = False) -> None:
    """Args:
      noise_multipliers: z_j per group (0 for a non-private group).
      ratios: r_j per group, the weight multiplier of its mean.
      expected_group_sizes: D_j = q N_j per group for a fixed denominator, or
        None for the group's realized count.
      initial_clip_norm: S at the first round.
      target_unclipped_quantile: kappa.
      clip_learning_rate: eta_b; 0 fixes the clip norm.
      clip_count_stddev: z_b, the noise std on the centred clip count.
      expected_clients_per_round: the clip fraction's fixed denominator, or
        None for the realized number of clients.
      seed: the DP noise's seed; secret in a real run
        (`tff_hdp.privacy.dp_randomness`).
      value_sum_factory: the inner sum of the clients' contributions.
      release_unprotected_counts: report the exact counts no epsilon covers
        (see the class docstring) instead of NaN.
      scaled_rows: take weight rows whose one nonzero entry a lies in
        (0, 1]: the client counts once in that group, its clipped update
        scaled by a (`valid_group_rows`; `MergedGroupsFactory`'s scales).

    Raises:
      ValueError: if the settings are inconsistent or out of range.
    """
    _validate(noise_multipliers, ratios, expected_group_sizes,
              initial_clip_norm, target_unclipped_quantile,
              clip_learning_rate, clip_count_stddev,
              expected_clients_per_round)
    self._z = np.asarray(noise_multipliers, np.float32)
    self._r = np.asarray(ratios, np.float32)
    self._fixed = np.array([d is not None for d in expected_group_sizes])
    self._d = np.array([d if d is not None else 0.0
                        for d in expected_group_sizes], np.float32)
    self._initial_clip_norm = float(initial_clip_norm)
    self._kappa = float(target_unclipped_quantile)
    self._eta_b = float(clip_learning_rate)
    self._z_b = float(clip_count_stddev)
    self._clip_denominator = expected_clients_per_round
    self._seed = int(seed)
    self._value_sum_factory = (tff.aggregators.SumFactory()
                               if value_sum_factory is None else
                               value_sum_factory)
    noised = self._z > 0
    release = bool(release_unprotected_counts)
    self._withheld_counts = noised & (not release)
    self._withhold_total = bool(noised.any()) and not release
    self._withhold_fraction = self._withhold_total and self._eta_b == 0
    self.scaled_rows = bool(scaled_rows)

  @classmethod
  def from_plan(cls, plan: plans.PrivacyPlan, clip: plans.ClipSettings,
                seed: int,
                value_sum_factory: (tff.aggregators.UnweightedAggregationFactory
                                    | None) = None,
                release_unprotected_counts: bool = False
                ) -> HeterogeneousDPFactory:
    """The factory a FedHDP privacy plan calibrated.

    Args:
      plan: the run's privacy plan (noise multipliers, groups and their
        ratios, denominators, clip-count noise).
      clip: the clip settings the plan was made for.
      seed: the DP noise's seed (the run's secret).
      value_sum_factory: the inner sum (default `tff.aggregators.SumFactory`).
      release_unprotected_counts: as the constructor's.

    Returns:
      The factory of this class for that plan.

    Raises:
      ValueError: if the plan's settings are inconsistent or out of range (as
        the constructor checks them).
    """
    return cls(
        noise_multipliers=plan.noise_multipliers,
        ratios=[g.ratio for g in plan.assignment.groups],
        expected_group_sizes=plan.expected_group_sizes,
        initial_clip_norm=clip.initial_norm,
        target_unclipped_quantile=clip.target_quantile,
        clip_learning_rate=clip.learning_rate,
        clip_count_stddev=plan.clip_count_stddev,
        expected_clients_per_round=plan.expected_clients_per_round,
        seed=seed,
        value_sum_factory=value_sum_factory,
        release_unprotected_counts=release_unprotected_counts)

  @classmethod
  def gaussian_adaptive(
      cls, noise_multipliers: Sequence[float],
      expected_group_sizes: Sequence[float],
      ratios: Sequence[float] | None = None,
      initial_l2_norm_clip: float = 0.1,
      target_unclipped_quantile: float = 0.5, learning_rate: float = 0.2,
      clipped_count_stddev: float | None = None,
      seed: int | None = None,
      release_unprotected_counts: bool = False) -> HeterogeneousDPFactory:
    """Per-group Gaussian noise with an adaptive clip, as TFF's
    `DifferentiallyPrivateFactory.gaussian_adaptive` per group.

    Args:
      noise_multipliers: z_j per group (0: a group without noise).
      expected_group_sizes: q N_j per group, the fixed denominators.
      ratios: r_j per group (default 1 each).
      initial_l2_norm_clip: S at round 1.
      target_unclipped_quantile: kappa.
      learning_rate: eta_b of the geometric clip update.
      clipped_count_stddev: z_b (default TFF's: 5% of the expected clients
        per round).
      seed: the noise's seed, which must stay secret (default: a fresh one
        from the operating system's entropy).
      release_unprotected_counts: as the constructor's.

    Returns:
      The factory; its epsilon per group is `tff_hdp.privacy.accounting`'s
      for z_eff = (z_j^-2 + (2 z_b)^-2)^-1/2.

    Raises:
      ValueError: a value out of range (as the constructor checks them).
    """
    expected = sum(expected_group_sizes)
    return cls(noise_multipliers, ratios or [1.0] * len(noise_multipliers),
               expected_group_sizes, initial_l2_norm_clip,
               target_unclipped_quantile, learning_rate,
               0.05 * expected if clipped_count_stddev is None
               else clipped_count_stddev, expected,
               dp_randomness.fresh_secret() if seed is None else seed,
               release_unprotected_counts=release_unprotected_counts)

  @classmethod
  def gaussian_fixed(cls, noise_multipliers: Sequence[float],
                     expected_group_sizes: Sequence[float], clip: float,
                     ratios: Sequence[float] | None = None,
                     seed: int | None = None,
                     release_unprotected_counts: bool = False
                     ) -> HeterogeneousDPFactory:
    """Per-group Gaussian noise at a fixed clip norm `clip`, as TFF's
    `DifferentiallyPrivateFactory.gaussian_fixed` per group (the other
    arguments as `gaussian_adaptive`'s); no count is released."""
    return cls(noise_multipliers, ratios or [1.0] * len(noise_multipliers),
               expected_group_sizes, clip, 0.5, 0.0, 0.0,
               sum(expected_group_sizes),
               dp_randomness.fresh_secret() if seed is None else seed,
               release_unprotected_counts=release_unprotected_counts)

  @property
  def num_groups(self) -> int:
    return len(self._z)

  def _expected_weight_type(self) -> tff.Type:
    return tff.TensorType(np.float32, [self.num_groups])

  def _contribution(self, value, one_hot, clip_norm):
    """One client's clipped update in its group's slot, count and clip bit.

    Returns `group_sums` (per leaf, shape [l] + leaf shape), `counts` [l] and
    `centred_bits`: what `federated_sum` adds up for the server update.
    """
    l = self.num_groups
    one_hot = valid_group_rows(one_hot, self.scaled_rows)
    member = tf.cast(one_hot > 0, tf.float32)  # counts once, whatever a
    leaves = tf.nest.flatten(value)
    norm = tf.linalg.global_norm(leaves)
    clipped, _ = tf.clip_by_global_norm(leaves, clip_norm, use_norm=norm)
    # It returns NaN for a non-finite norm (NaN, inf, or overflowed squares):
    # such an update adds zero instead, and its bit says clipped.
    finite = tf.math.is_finite(norm)
    clipped = [clipping.zero_rows(x, finite) for x in clipped]
    counted = tf.reduce_sum(member)
    stacked = [
        tf.reshape(one_hot, [l] + [1] * x.shape.rank) * x[tf.newaxis]
        for x in clipped
    ]
    centred_bit = clipping.centred_clip_bits(norm, clip_norm) * counted
    return collections.OrderedDict(
        group_sums=stacked, counts=member, centred_bits=centred_bit)

  def create(self, value_type: tff.types.Type,
             weight_type: tff.types.Type) -> tff.templates.AggregationProcess:
    """The aggregation process for client updates of `value_type`.

    Args:
      value_type: the TFF type of a client's update.
      weight_type: float32[l], the one-hot group vector (cohorts: [None, l]).

    Returns:
      A `tff.templates.AggregationProcess` whose state holds the clip norm,
      round, noise seed and the inner sum's state, and whose measurements are
      the clip norm, counts, weights, noise std, the clipped-fraction
      estimate (NaN where withheld: the class docstring) and the inner
      sum's measurements.

    Raises:
      TypeError: if `weight_type` is not the group vector.
    """
    value_type = tff.types.to_type(value_type)
    weight_type = tff.types.to_type(weight_type)
    expected_weight = self._expected_weight_type()
    if not weight_type.is_equivalent_to(expected_weight):
      raise weight_type_error(
          f'the one-hot privacy-group vector {expected_weight}', weight_type)
    template = tff.types.structure_from_tensor_type_tree(lambda t: None,
                                                         value_type)
    l = self.num_groups

    @tff.tensorflow.computation
    def initial_state():
      return collections.OrderedDict(
          clip_norm=tf.constant(self._initial_clip_norm, tf.float32),
          round_num=tf.constant(0, tf.int64),
          seed=tf.constant(self._seed, tf.int64))

    state_type = initial_state.type_signature.result
    clip_type = state_type['clip_norm']

    @tff.tensorflow.computation(value_type, weight_type, clip_type)
    def client_contribution(value, one_hot, clip_norm):
      return self._contribution(value, one_hot, clip_norm)

    contribution_type = client_contribution.type_signature.result
    value_sum = self._value_sum_factory.create(contribution_type)

    @tff.tensorflow.computation(state_type, contribution_type)
    def server_update(state, totals):
      clip_norm = state['clip_norm']
      seed = tf.stack([state['seed'], state['round_num']])
      counts = totals['counts']
      fixed = tf.constant(self._fixed)
      denominators = tf.where(fixed, tf.constant(self._d), counts)
      group_weights = tf.constant(self._r) * denominators
      group_weights = tf.math.divide_no_nan(group_weights,
                                            tf.reduce_sum(group_weights))
      noise_std = tf.constant(self._z) * clip_norm
      combined = []
      for i, group_sum in enumerate(totals['group_sums']):
        shape = tf.shape(group_sum)
        noise = tf.random.stateless_normal(
            shape, tf.random.experimental.stateless_fold_in(seed, i))
        scale = tf.reshape(noise_std, [l] + [1] * (group_sum.shape.rank - 1))
        denom = tf.reshape(denominators, scale.shape)
        means = tf.math.divide_no_nan(group_sum + scale * noise, denom)
        w = tf.reshape(group_weights, scale.shape)
        combined.append(tf.reduce_sum(w * means, axis=0))
      result = tf.nest.pack_sequence_as(template, combined)

      num_clients = tf.reduce_sum(counts)
      clip_denominator = (tf.constant(self._clip_denominator, tf.float32)
                          if self._clip_denominator is not None else
                          num_clients)
      count_noise = self._z_b * tf.random.stateless_normal(
          [], tf.random.experimental.stateless_fold_in(seed, -1))
      unclipped = tf.math.divide_no_nan(totals['centred_bits'] + count_noise,
                                        clip_denominator) + 0.5
      unclipped = tf.clip_by_value(unclipped, 0.0, 1.0)
      new_clip = clip_norm * tf.exp(-self._eta_b * (unclipped - self._kappa))
      new_state = collections.OrderedDict(
          clip_norm=new_clip, round_num=state['round_num'] + 1, seed=state['seed'])
      group_noise_std = tf.math.divide_no_nan(noise_std, denominators)
      released_unclipped = withhold(unclipped, self._withhold_fraction)
      measurements = collections.OrderedDict(
          clip_norm=clip_norm,
          num_clients=withhold(num_clients, self._withhold_total),
          group_client_counts=withhold(counts, self._withheld_counts),
          group_weights=group_weights,
          group_noise_stddev=group_noise_std,
          unclipped_fraction_estimate=released_unclipped,
          fraction_clipped_estimate=1.0 - released_unclipped)
      return new_state, result, measurements

    def with_value_sum(own, inner):
      """The process state: this factory's fields and the inner sum's."""
      return tff.federated_zip(collections.OrderedDict(
          [(k, own[k]) for k in tff.structure.name_list(state_type)] +
          [('value_sum', inner)]))

    @tff.federated_computation()
    def init_fn():
      return with_value_sum(tff.federated_eval(initial_state, tff.SERVER),
                            value_sum.initialize())

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS),
        tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      clip_at_clients = tff.federated_broadcast(state['clip_norm'])
      contributions = tff.federated_map(client_contribution,
                                        (value, weight, clip_at_clients))
      summed = value_sum.next(state['value_sum'], contributions)
      own = tff.federated_zip(
          collections.OrderedDict([(k, state[k]) for k in
                                   tff.structure.name_list(state_type)]))
      new_own, result, measurements = tff.federated_map(
          server_update, (own, summed.result))
      measurements = tff.federated_zip(collections.OrderedDict(
          [(k, measurements[k]) for k in tff.structure.name_list(
              server_update.type_signature.result[2])] +
          [('value_sum', summed.measurements)]))
      return tff.templates.MeasuredProcessOutput(
          with_value_sum(new_own, summed.state), result, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)


class CohortHeterogeneousDPFactory(HeterogeneousDPFactory):
  """`HeterogeneousDPFactory` for cohorts: each TFF client holds many clients.

  A cohort (`tff_hdp.learning.cohort`) is one TFF client that trains K sampled clients
  and sends their updates stacked, leaves of shape [K] + leaf shape, with
  weight the [K, l] matrix of their one-hot group rows (a zero row is a
  padding slot or a dropped client). Each row is clipped to S on its own at
  CLIENTS and then summed per group, so the server receives exactly the group
  sums, counts and clip bits it would get from K separate TFF clients and runs
  the same noise, denominators, weights and clip update: the mechanism, and so
  the privacy accounting, is unchanged. K may differ between cohorts and
  rounds.
  """

  def _expected_weight_type(self) -> tff.Type:
    return tff.TensorType(np.float32, [None, self.num_groups])

  def _contribution(self, value, one_hot, clip_norm):
    one_hot = valid_group_rows(one_hot, self.scaled_rows)
    member = tf.cast(one_hot > 0, tf.float32)
    # As tf.clip_by_global_norm: scale by S / max(||Delta||, S), row by row;
    # a row with a non-finite norm adds zero, even in a zero-weight slot.
    clipped, norms = clipping.clip_rows(tf.nest.flatten(value), clip_norm)
    group_sums = [tf.tensordot(one_hot, x, [[0], [0]]) for x in clipped]
    counted = tf.reduce_sum(member, axis=1)
    centred_bits = tf.reduce_sum(
        clipping.centred_clip_bits(norms, clip_norm) * counted)
    return collections.OrderedDict(
        group_sums=group_sums, counts=tf.reduce_sum(member, axis=0),
        centred_bits=centred_bits)

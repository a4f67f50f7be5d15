"""The built-in trusted-server rules: each one's factory wiring (from the
run's `TrustedContext` to its `GroupFactory`), privacy plan, groups and
options, and their records (`RECORDS`, which the registry lists first).

The command line reads these records for its help and its checks before
TensorFlow is imported, so every factory and plan imports what it builds
when it is first called. A rule from user code is written the same way
(`tff_hdp.learning.records`, and `tff_hdp.learning.correlated_noise` for
noise correlated over rounds) and added with `algorithms.register`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping, Sequence, TYPE_CHECKING

from tff_hdp.learning import correlated_noise
from tff_hdp.learning.records import Algorithm
from tff_hdp.learning.records import GroupFactory
from tff_hdp.learning.records import GroupNoise
from tff_hdp.learning.records import Option
from tff_hdp.learning.records import TRUSTED
from tff_hdp.learning.records import TrustedContext
from tff_hdp.privacy import release_policy
from tff_hdp.privacy.distributed_noise import MIN_MEMBERS
from tff_hdp.privacy.release_policy import Measurement

if TYPE_CHECKING:
  from tff_hdp.privacy import plans
  from tff_hdp.privacy.privacy_groups import GroupAssignment

_FEDHDP_MEASUREMENTS = (
    Measurement('clip_norm', 'clip_norm'),
    Measurement('fraction_clipped_estimate', 'fraction_clipped_estimate',
                covered=release_policy.COVERED_WITH_ADAPTIVE_CLIPPING),
    Measurement('group_client_counts', 'count_{group}', kind=int,
                per_group=True,
                covered=release_policy.COVERED_FOR_NON_PRIVATE_GROUPS),
    Measurement('group_weights', 'weight_{group}', per_group=True),
    Measurement('group_noise_stddev', 'noise_std_{group}', per_group=True),
)

# Per-group streams report no clip fraction: their clip is fixed.
_STREAM_MEASUREMENTS = tuple(m for m in _FEDHDP_MEASUREMENTS
                             if m.name != 'fraction_clipped_estimate')


def _fedhdp_factory(context: TrustedContext,
                    ratios: tuple[float, ...] | None = None) -> GroupFactory:
  """`HeterogeneousDPFactory` (its cohort twin in cohorts) for the plan,
  its groups at `ratios` if given."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.aggregators import heterogeneous_dp
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy.privacy_groups import with_ratios
  factory = (heterogeneous_dp.CohortHeterogeneousDPFactory if context.cohorts
             else heterogeneous_dp.HeterogeneousDPFactory)
  plan = context.plan
  if ratios is not None:
    plan = dataclasses.replace(
        plan, assignment=with_ratios(plan.assignment, ratios))
  return GroupFactory(
      factory.from_plan(
          plan, context.clip, context.seed,
          release_unprotected_counts=context.release_unprotected_counts),
      GroupNoise(plan.noise_multipliers, plan.ledger.clip_count_stddev),
      seeded=True, ratios=ratios)


def _noise_aware_ratios(context: TrustedContext) -> tuple[float, ...] | None:
  """With neither --r nor --level_ratios given, the groups' noise-aware
  ratios (`group_weights`), from public quantities only: each group's
  noise multiplier and expected count in the plan, the model's size and
  --heterogeneity; None otherwise (the groups' own ratios)."""
  options = context.options
  if options.get('r') is not None or options.get('level_ratios') is not None:
    return None
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import planner
  spread = options.get('heterogeneity')
  return planner.noise_aware_group_ratios(
      context.plan, context.num_parameters, 1.0 if spread is None else spread)


def _fedhdp_noise_aware_factory(context: TrustedContext) -> GroupFactory:
  """FedHDP's factory, its groups at the noise-aware ratios when neither
  --r nor --level_ratios is given (`_noise_aware_ratios`)."""
  return _fedhdp_factory(context, _noise_aware_ratios(context))


def _groups_without_members(assignment) -> tuple[int, ...]:
  """The groups without guarantee that no client is in (the opt-out group
  when nobody opts out): they get no stream, so no slot a client sends."""
  return tuple(j for j, (group, size) in enumerate(
      zip(assignment.groups, assignment.group_sizes()))
               if not group.is_private and size == 0)


def _streams_factory(context: TrustedContext) -> GroupFactory:
  """`PerGroupStreamsFactory`: each private group's stream adds the
  correlated noise its plan accounts (`correlated_noise.correlated_stream`:
  BLT's buffers, or TFF's efficient tree), a group without guarantee a
  clipped sum; the groups at the noise-aware ratios unless --r or
  --level_ratios is given."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from tff_hdp.privacy.privacy_groups import with_ratios
  # pylint: enable=g-import-not-at-top
  plan = context.plan
  ratios = _noise_aware_ratios(context)
  if ratios is not None:
    plan = dataclasses.replace(
        plan, assignment=with_ratios(plan.assignment, ratios))
  clip = context.clip.initial_norm
  empty = _groups_without_members(plan.assignment)
  factories = []
  for j, (group, z) in enumerate(zip(plan.assignment.groups,
                                     plan.noise_multipliers)):
    seed = int(np.random.default_rng([context.seed, j, 0x57]).integers(2**62))
    factories.append(
        None if j in empty else
        correlated_noise.correlated_stream(plan, z, clip, seed,
                                           context.cohorts)
        if group.is_private else
        correlated_noise.plain_stream(clip, context.cohorts))
  factory = correlated_noise.per_group_streams(context.cohorts)(
      factories, [g.ratio for g in plan.assignment.groups],
      plan.expected_group_sizes, [z * clip for z in plan.noise_multipliers],
      clip, context.release_unprotected_counts)
  return GroupFactory(factory, GroupNoise(plan.noise_multipliers, None),
                      seeded=True, ratios=ratios)


# Why a `poisson_only` record refuses any other sampling.
POISSON_ONLY = ('it samples each privacy group at its own Poisson rate: '
                'run it with --sampling=poisson.')


def distributed_accounting(options: Mapping[str, Any], bits: int,
                            clip: float, device, dim: int,
                            from_build: bool = False):
  """z -> the accounting of TFF's distributed-DP sum (--ddp_mechanism,
  --ddp_rounding) at `bits` bits and noise multiplier z for a model of
  `dim` parameters, at `device`'s participation: from TFF's build
  (`from_build`, seconds) or its arithmetic (`tff_distributed_dp.
  noise_at`, the same numbers in milliseconds, for a search)."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import tff_distributed_dp
  from tff_hdp.privacy import distributed_noise
  # pylint: enable=g-import-not-at-top
  mechanism, rounding = options['ddp_mechanism'], options['ddp_rounding']
  members_only = options['ddp_slots'] == 'own_group'

  def accounting(z: float) -> distributed_noise.DistributedShares:
    if from_build:
      built = tff_distributed_dp.built_noise(tff_distributed_dp.sum_factory(
          mechanism, z, device.clients_per_round, bits, clip, rounding), dim)
    else:
      built = tff_distributed_dp.noise_at(
          mechanism, z, device.clients_per_round, bits, clip, dim, rounding)
    common = dict(noise_multiplier=z, sensitivity=built.l2_sensitivity,
                  local_stddev=built.local_stddev, dim=built.dim,
                  members_only=members_only)
    participation = (device.population, device.clients_per_round,
                     device.min_separation, device.max_participations,
                     device.noise)
    if mechanism == 'skellam':
      return distributed_noise.DistributedSkellam(
          *participation, l1_sensitivity=built.l1_sensitivity, **common)
    return distributed_noise.DistributedDiscreteGaussian(*participation,
                                                         **common)

  return accounting


def _meeting_target(group, z: float, rounds: int, build, bits: int) -> float:
  """From `z` up, within 0.01% the least noise multiplier whose build
  `build(z')` meets `group`'s target over `rounds`. TFF's scale shrinks as
  the noise grows, and its rounding inflates the sensitivity with it, so
  each candidate is accounted from its own build; at too few bits no noise
  meets the target."""
  def meets(z):
    noise = build(z)
    return noise.epsilon_spent(z, None, rounds,
                               group.delta) <= group.epsilon, noise

  ok, noise = meets(z)
  if ok:
    return z
  def scale(noise):  # what the epsilon grows with (Delta / noise std)
    return noise.sensitivity / noise.local_stddev

  low, high = z, noise.calibrate(group.epsilon, group.delta, rounds)
  for _ in range(30):
    ok, found = meets(high)
    if ok or scale(found) > scale(noise) * 0.999:  # more noise, no less scale
      break
    low, high, noise = high, high * 1.5, found
  if not ok:
    raise ValueError(
        f'--ddp_bits={bits} for privacy level {group.name!r}: rounding to '
        f'{bits} bits inflates the sensitivity as fast as the noise grows, '
        'so that no noise multiplier meets its target; raise its --ddp_bits.')
  while high > low * 1.0001:
    middle = (low + high) / 2
    if meets(middle)[0]:
      high = middle
    else:
      low = middle
  return high


_INDEPENDENT_DEVICE_PLAN = correlated_noise.device_plan(
    correlated_noise.independent_strategy)


def _distributed_plan(assignment, sampling, rounds, clip,
                      denominator='expected', allow_large_delta=False, *,
                      options, num_parameters) -> plans.PrivacyPlan:
  """The Gaussian plan for devices (fresh noise every round), each private
  group's noise multiplier then raised to the least whose distributed
  noise, as TFF builds it at the level's --ddp_bits (`_meeting_target`),
  meets its target. Planned before the run's folder is claimed, so bits
  that no noise makes enough are refused before anything is written."""
  plan = _INDEPENDENT_DEVICE_PLAN(assignment, sampling, rounds, clip,
                                  denominator, allow_large_delta)
  if options['ddp_slots'] == 'own_group':
    _check_own_group_sizes(plan)
  bits = iter(options['ddp_bits'])
  multipliers = []
  for group, z in zip(plan.assignment.groups, plan.noise_multipliers):
    if group.is_private:
      b = next(bits)
      z = _meeting_target(group, z, rounds, distributed_accounting(
          options, b, clip.initial_norm, plan.sampling, num_parameters), b)
    multipliers.append(z)
  return dataclasses.replace(plan, noise_multipliers=tuple(multipliers))


def _check_own_group_sizes(plan: plans.PrivacyPlan) -> None:
  """ValueError naming --ddp_slots=own_group and the level unless each
  private group expects at least `MIN_MEMBERS` devices a round: below it,
  most rounds would withhold the group's sum."""
  for group, expected in zip(plan.assignment.groups,
                             plan.expected_group_sizes):
    if group.is_private and expected < MIN_MEMBERS:
      raise ValueError(
          f'--ddp_slots=own_group: privacy level {group.name!r} expects '
          f'{expected:.3g} devices a round, and its sum is revealed only in '
          f'a round with {MIN_MEMBERS} or more; raise --clients_per_round, '
          'or send a slot per group (--ddp_slots=every_group).')


_distributed_plan.device_only = True
_distributed_plan.reads_options = True


def check_ddp_bits(bits: Sequence[float], clients_per_round: int,
                   levels: Sequence[str]) -> None:
  """ValueError naming --ddp_bits (and the level, bits given per level)
  unless each private level's bits hold the modular sum of a round's
  shares as TFF requires (`distributed_noise.min_bits`); the command line
  checks the flags with it before TensorFlow loads."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import distributed_noise
  least = distributed_noise.min_bits(clients_per_round)
  for b, level in zip(bits, levels):
    if b < least:
      raise ValueError(
          f'--ddp_bits={b:g}' + (f' for privacy level {level!r}'
                                 if len(bits) > 1 else '') +
          f': the modular sum of a round\'s {clients_per_round} noise shares '
          f'needs {least} bits or more (TFF\'s check of its modulus against '
          'the clients); raise it or lower --clients_per_round.')


def _distributed_factory(context: TrustedContext) -> GroupFactory:
  """`DistributedGroupDPFactory` (its cohort twin in cohorts): each
  private group's sum through TFF's distributed noise (--ddp_mechanism) at
  its level's --ddp_bits, at the plan's noise multipliers
  (`_distributed_plan`: each the least whose distributed noise meets the
  group's target); the groups at the noise-aware ratios of those
  multipliers unless --r or --level_ratios is given."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import distributed_group_dp
  from tff_hdp.privacy.privacy_groups import with_ratios
  # pylint: enable=g-import-not-at-top
  plan = context.plan
  device = plan.sampling
  mechanism = context.options['ddp_mechanism']
  clip = context.clip.initial_norm
  private = iter(context.options['ddp_bits'])
  bits = [next(private) if g.is_private else None
          for g in plan.assignment.groups]
  rounding, slots = context.options['ddp_rounding'], context.options[
      'ddp_slots']
  named = {'dgauss': 'discrete Gaussian', 'skellam': 'Skellam'}[mechanism]
  empty = _groups_without_members(plan.assignment)
  if slots == 'own_group':
    sent = ('1 slot (its clipped update) and, in a private group, a noise '
            'share of std z S / sqrt(c), c its group\'s devices in the '
            'round; the server learns which device is in which group, and '
            'nothing of a private group with fewer than '
            f'{MIN_MEMBERS} devices in a round. Each '
            'epsilon assumes every device of a group adds its share')
    finish = 'of a group\'s devices'
  else:
    sent = (f'{plan.assignment.num_groups - len(empty)} slots (its clipped '
            'update in its group\'s, zeros elsewhere; none for a group '
            'without members) and a noise share in each private slot; the '
            'server learns the noisy group sums and the groups\' counts, '
            'not which device is in which group. Each epsilon assumes every '
            'device of a round adds its share')
    finish = 'of a round\'s devices'
  notes = [f'distributed {named} noise: every one of a round\'s '
           f'{device.clients_per_round} devices sends {sent}. '
           f'{rounding.capitalize()} rounding to integers.']
  accounted = []
  for group, z, b in zip(plan.assignment.groups, plan.noise_multipliers,
                         bits):
    noise = None
    if group.is_private:
      with warnings.catch_warnings():  # TFF's, of a small scale
        warnings.simplefilter('ignore')
        noise = distributed_accounting(context.options, b, clip, device,
                                        context.num_parameters,
                                        from_build=True)(z)
      eps = [noise.epsilon_spent(z, None, plan.rounds, group.delta, f)
             for f in (1.0, 0.9, 0.5)]
      notes.append(
          f'{group.name}: {b} bits, noise multiplier {z:.4g}, eps '
          f'{eps[0]:.3g}; if only 90% {finish} finish, '
          f'{eps[1]:.3g}; if half, {eps[2]:.3g}')
    accounted.append(noise)
  ratios = _noise_aware_ratios(context)
  if ratios is not None:
    plan = dataclasses.replace(
        plan, assignment=with_ratios(plan.assignment, ratios))
  factory = (distributed_group_dp.CohortDistributedGroupDPFactory
             if context.cohorts else
             distributed_group_dp.DistributedGroupDPFactory)(
      plan.noise_multipliers, [g.ratio for g in plan.assignment.groups],
      plan.expected_group_sizes, clip, bits,
      device.clients_per_round, mechanism,
      context.release_unprotected_counts, empty, rounding, slots)
  return GroupFactory(factory, GroupNoise(plan.noise_multipliers, None,
                                          tuple(accounted)), ratios=ratios,
                      notes=tuple(notes))


def _individualized_plan(*args, **kwargs) -> plans.PrivacyPlan:
  """`plans.plan_individualized_sampling`: one z, each group its rate."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy.plans import plan_individualized_sampling
  return plan_individualized_sampling(*args, **kwargs)


_individualized_plan.poisson_only = True


def _frontier_plan(assignment, sampling, rounds, clip, denominator='expected',
                   allow_large_delta=False, *, options,
                   num_parameters) -> plans.PrivacyPlan:
  """`frontier.plan_frontier` at --tilt (not given: the default point for
  --heterogeneity and the model's size)."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import frontier
  spread = options.get('heterogeneity')
  return frontier.plan_frontier(
      assignment, sampling, rounds, clip, options.get('tilt'),
      1.0 if spread is None else spread, num_parameters, denominator,
      allow_large_delta)


_frontier_plan.poisson_only = True
_frontier_plan.reads_options = True


@dataclasses.dataclass(frozen=True)
class _MergedGroups:
  """The private groups merged into one (`MergedGroupsFactory.
  private_together`) at noise multiplier z: its expected count, the
  non-private groups after it, the merged groups' noise-aware ratios and
  each original group's ratio."""

  private_count: float
  others: tuple[int, ...]
  ratios: tuple[float, ...]
  group_ratios: tuple[float, ...]

  @classmethod
  def of(cls, context: TrustedContext, z: float) -> _MergedGroups:
    # pylint: disable-next=g-import-not-at-top
    from tff_hdp.privacy import planner
    plan = context.plan
    private = [g.is_private for g in plan.assignment.groups]
    private_count = sum(d for d, p in zip(plan.expected_group_sizes, private)
                        if p)
    others = tuple(j for j, p in enumerate(private) if not p)
    spread = 1.0 if context.options.get('heterogeneity') is None else (
        context.options['heterogeneity'])
    ratios = planner.merged_ratios(plan, context.num_parameters, spread, z)
    return cls(private_count, others, ratios, planner.merged_group_ratios(
        plan, context.num_parameters, spread, z))


def _one_draw_inner(context: TrustedContext, z: float,
                    ratios: Sequence[float],
                    expected: Sequence[float | None],
                    scaled_rows: bool = False):
  """`HeterogeneousDPFactory` (its cohort twin in cohorts) over merged
  groups whose first one, the private groups' sums, takes one draw at `z`
  (the others none), at the plan's clip settings."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.aggregators import heterogeneous_dp
  plan = context.plan
  return (heterogeneous_dp.CohortHeterogeneousDPFactory if context.cohorts
          else heterogeneous_dp.HeterogeneousDPFactory)(
              noise_multipliers=[z] + [0.0] * (len(ratios) - 1),
              ratios=ratios,
              expected_group_sizes=expected,
              initial_clip_norm=context.clip.initial_norm,
              target_unclipped_quantile=context.clip.target_quantile,
              clip_learning_rate=context.clip.learning_rate,
              clip_count_stddev=plan.clip_count_stddev,
              expected_clients_per_round=plan.expected_clients_per_round,
              seed=context.seed,
              release_unprotected_counts=context.release_unprotected_counts,
              scaled_rows=scaled_rows)


def _individualized_factory(context: TrustedContext) -> GroupFactory:
  """The private groups' sums merged under one noise draw
  (`MergedGroupsFactory` over `HeterogeneousDPFactory`), their mean
  combined with each non-private group's at the noise-aware ratio."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.aggregators import merged_groups
  plan = context.plan
  private = [g.is_private for g in plan.assignment.groups]
  z = max(plan.noise_multipliers)
  merged = _MergedGroups.of(context, z)
  inner = _one_draw_inner(
      context, z, merged.ratios,
      [merged.private_count] + [None] * len(merged.others))
  return GroupFactory(
      merged_groups.MergedGroupsFactory.private_together(inner, private),
      GroupNoise(plan.noise_multipliers, plan.ledger.clip_count_stddev),
      seeded=True, ratios=merged.group_ratios)


def _frontier_factory(context: TrustedContext) -> GroupFactory:
  """Every group's clipped sum times its scale a_j (`frontier`) under one
  noise draw of std z S, divided by sum_j a_j q_j N_j
  (`MergedGroupsFactory` with scales over `HeterogeneousDPFactory` with
  one group): group j is accounted at z / a_j."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.aggregators import merged_groups
  plan = context.plan
  scales = plan.group_scales
  z = max(r * a for r, a, g in zip(plan.noise_multipliers, scales,
                                   plan.assignment.groups) if g.is_private)
  counted = sum(a * d for a, d in zip(scales, plan.expected_group_sizes))
  inner = _one_draw_inner(context, z, [1.0], [counted], scaled_rows=True)
  return GroupFactory(
      merged_groups.MergedGroupsFactory(
          inner, [0] * len(scales), scales),
      GroupNoise(plan.noise_multipliers, plan.ledger.clip_count_stddev),
      seeded=True, ratios=scales)


def _capped_stream_factory(context: TrustedContext) -> GroupFactory:
  """One BLT stream for every private group (`MergedGroupsFactory` over
  `PerGroupStreamsFactory`), its devices capped per level at
  --level_participations (not given: the run's cap): one noise multiplier,
  the least that meets every group's target at its own cap, and each group
  accounted at its cap. A group without guarantee is a clipped sum, at the
  noise-aware ratio against the stream's mean."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from tff_hdp.aggregators import merged_groups
  # pylint: enable=g-import-not-at-top
  plan = context.plan
  sampling = plan.sampling
  groups = plan.assignment.groups
  private = [g.is_private for g in groups]
  caps = context.options.get('level_participations')
  if caps is None:
    caps = [sampling.max_participations] * sum(private)
  check_level_participations(caps, sampling.max_participations)
  capped = iter(caps)
  participations = tuple(
      dataclasses.replace(sampling, max_participations=int(next(capped)))
      if p else None for p in private)
  z = max(part.calibrate(g.epsilon, g.delta, plan.rounds, None)
          for g, part in zip(groups, participations) if part is not None)
  merged = _MergedGroups.of(context, z)
  others = len(merged.others)
  clip = context.clip.initial_norm
  seed = int(np.random.default_rng([context.seed, 0x57]).integers(2**62))
  inner = correlated_noise.per_group_streams(context.cohorts)(
      [correlated_noise.correlated_stream(plan, z, clip, seed,
                                          context.cohorts)] +
      [correlated_noise.plain_stream(clip, context.cohorts)] * others,
      merged.ratios,
      [merged.private_count] + [None] * others,
      [z * clip] + [0.0] * others, clip, context.release_unprotected_counts)
  return GroupFactory(
      merged_groups.MergedGroupsFactory.private_together(inner, private),
      GroupNoise(tuple(z if p else 0.0 for p in private), None,
                 participations),
      seeded=True, ratios=merged.group_ratios)


def check_level_participations(caps: Sequence[float],
                               max_participations: int) -> None:
  """ValueError naming --level_participations unless each cap is a whole
  number in [1, `max_participations`] (the stream's cap); the command line
  checks the flags with it before TensorFlow loads."""
  for k in caps:
    if k != int(k) or not 1 <= k <= max_participations:
      raise ValueError(
          f'--level_participations: {k:g} is not a whole number of '
          f'participations in [1, --max_participations={max_participations}]'
          ' (the stream\'s cap).')


def _with_ratio(choices: GroupAssignment,
                options: Mapping[str, Any]) -> GroupAssignment:
  """FedHDP: the clients' own groups, the private ones at ratio r, or each
  level at its --level_ratios value (neither: the factory's noise-aware
  ratios)."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy.privacy_groups import with_ratio
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy.privacy_groups import with_level_ratios
  if options.get('r') is not None:
    if options.get('level_ratios') is not None:
      raise ValueError('--r and --level_ratios: give one of them (one ratio '
                       'for every private level, or one per level).')
    return with_ratio(choices, options['r'])
  if options.get('level_ratios') is not None:
    return with_level_ratios(choices, options['level_ratios'])
  return choices


def _strictest(choices: GroupAssignment,
               options: Mapping[str, Any]) -> GroupAssignment:
  """DP-FedAvg: everyone in one private group at the strictest target."""
  del options
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy.privacy_groups import everyone_at_strictest
  return everyone_at_strictest(choices)


def _non_private(choices: GroupAssignment,
                 options: Mapping[str, Any]) -> GroupAssignment:
  """Non-private FedAvg: everyone in one group without noise."""
  del options
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy.privacy_groups import everyone_non_private
  return everyone_non_private(choices)


# FedHDP weighs a group r_j N_j in float32 (N_j up to 2^31 - 1): r at most
# 1e29 keeps that finite.
MAX_RATIO = 1e29
RATIO = Option('r', 'FedHDP: ratio(s) r of the private groups\' weight to the '
               'non-private group\'s, one configuration per value (SPEC.md '
               '§1). Not given (and no --level_ratios): each group\'s '
               'noise-aware ratio from its noise multiplier, expected count, '
               'the model\'s size and --heterogeneity, printed by the run.',
               low=0.0, high=MAX_RATIO, sweep=True, label='r')
LEVEL_RATIOS = Option(
    'level_ratios', 'FedHDP: one ratio r_j per private level, in --epsilons '
    'order (the non-private group\'s is 1); one configuration, named '
    'fedhdp.', low=0.0, high=MAX_RATIO, per_level=True, excludes=('r',))
HETEROGENEITY = Option(
    'heterogeneity', 'FedHDP\'s noise-aware ratios: the spread h of the '
    'clients\' updates around their mean, as a fraction of what the clip '
    'norm allows (sigma_c^2 = h S^2 / d; not given: 1, as spread as the '
    'clip allows). A public setting: it costs no privacy.', low=0.0,
    low_open=True, high=MAX_RATIO)  # h D_j, like r_j N_j: a count times it
LEVEL_PARTICIPATIONS = Option(
    'level_participations', 'blt_shared: the most rounds a device of each '
    'private level takes part in, in --epsilons order, each at most '
    '--max_participations (not given: that cap for every level). Devices '
    'that stop sooner spend less of the one stream\'s privacy.', low=1,
    per_level=True)
TILT = Option(
    'tilt', 'frontier_sampling: the knob t in [0, 1] from every client '
    'counting equally in expectation (0, unbiased) to individualized '
    'sampling (1): each client of a level with individualized rate q* '
    'counts (q*)^t (not given: the t of 0, 0.05, ..., 1 with the least '
    'bound on the worst group\'s squared error at --heterogeneity, '
    'printed with each point\'s noise on the mean). Public: it costs no '
    'privacy.', low=0.0, high=1.0)
DDP_BITS = Option(
    'ddp_bits', 'fedhdp_ddp: the bit width of each private level\'s secure '
    'sum (TFF\'s DistributedDpSumFactory bits), one for all or one per '
    'level in --epsilons order: the noisy integer sum of a round\'s '
    'clients must fit in it.', kind=int, default=16, low=1, high=22,
    per_level=True, one_for_all=True)
DDP_MECHANISM = Option(
    'ddp_mechanism', 'fedhdp_ddp: the clients\' discrete noise, dgauss '
    '(distributed discrete Gaussian, Kairouz, Liu, Steinke 2021) or skellam '
    '(distributed Skellam, Agarwal, Kairouz, Liu 2021), each accounted by '
    'its own RDP bound.', kind=str, default='dgauss',
    choices=('dgauss', 'skellam'))
DDP_ROUNDING = Option(
    'ddp_rounding', 'fedhdp_ddp: how a device rounds its scaled update to '
    'integers, conditional (it rounds again until the norm is within '
    'Kairouz, Liu and Steinke\'s bound at beta = exp(-0.5), so rounding '
    'adds to the clip in quadrature) or unconditional (TFF\'s default, '
    'beta 0: the sensitivity grows by sqrt(d) rounding steps, and at 16 '
    'bits a strict level needs several times the noise).', kind=str,
    default='conditional', choices=('conditional', 'unconditional'))
DDP_SLOTS = Option(
    'ddp_slots', 'fedhdp_ddp: what a device sends, every_group (a slot per '
    'group, its update in its own group\'s and zeros elsewhere, and a '
    'noise share in every private slot: the server does not learn a '
    'device\'s group) or own_group (with --cohort_size only: one slot and '
    'one noise share, the server learns each device\'s group, and a group '
    f'with fewer than {MIN_MEMBERS} devices in a round reveals nothing that '
    'round).',
    kind=str, default='every_group', choices=('every_group', 'own_group'))

# The built-in trusted-server rules, in the order --help lists them.
RECORDS: tuple[Algorithm, ...] = (
    Algorithm('fedhdp', TRUSTED, 'FedHDP', _fedhdp_noise_aware_factory,
              (RATIO, LEVEL_RATIOS, HETEROGENEITY), _FEDHDP_MEASUREMENTS,
              cohorts=True, groups=_with_ratio, sweep='r'),
    Algorithm('fedhdp_blt', TRUSTED, 'FedHDP with per-group BLT noise',
              _streams_factory, (RATIO, LEVEL_RATIOS, HETEROGENEITY),
              _STREAM_MEASUREMENTS, cohorts=True, groups=_with_ratio,
              sweep='r',
              fixed_clip=True, privacy_plan=correlated_noise.device_plan(
                  correlated_noise.blt_strategy)),
    Algorithm('fedhdp_tree', TRUSTED, 'FedHDP with a tree per group',
              _streams_factory, (RATIO, LEVEL_RATIOS, HETEROGENEITY),
              _STREAM_MEASUREMENTS, cohorts=True, groups=_with_ratio,
              sweep='r', fixed_clip=True,
              privacy_plan=correlated_noise.device_plan(
                  correlated_noise.tree_strategy)),
    Algorithm('fedhdp_ddp', TRUSTED,
              'FedHDP with per-group distributed discrete noise',
              _distributed_factory,
              (RATIO, LEVEL_RATIOS, HETEROGENEITY, DDP_BITS, DDP_MECHANISM,
               DDP_ROUNDING, DDP_SLOTS),
              _STREAM_MEASUREMENTS, cohorts=True, groups=_with_ratio,
              sweep='r', fixed_clip=True, privacy_plan=_distributed_plan),
    Algorithm('blt_shared', TRUSTED,
              'one BLT stream, devices capped per level',
              _capped_stream_factory, (LEVEL_PARTICIPATIONS, HETEROGENEITY),
              _STREAM_MEASUREMENTS[:1], cohorts=True, fixed_clip=True,
              privacy_plan=correlated_noise.device_plan(
                  correlated_noise.blt_strategy)),
    Algorithm('individualized_sampling', TRUSTED,
              'individualized sampling (IDP-FedAvg SAMPLE)',
              _individualized_factory, (HETEROGENEITY,),
              _FEDHDP_MEASUREMENTS[:2], cohorts=True,
              privacy_plan=_individualized_plan),
    Algorithm('frontier_sampling', TRUSTED,
              'bias/noise frontier (one noise draw, per-level scales)',
              _frontier_factory, (TILT, HETEROGENEITY),
              _FEDHDP_MEASUREMENTS[:2], cohorts=True,
              privacy_plan=_frontier_plan),
    Algorithm('dp_fedavg', TRUSTED, 'DP-FedAvg', _fedhdp_factory,
              measurements=_FEDHDP_MEASUREMENTS, cohorts=True,
              groups=_strictest),
    Algorithm('nonprivate', TRUSTED, 'FedAvg', _fedhdp_factory,
              measurements=_FEDHDP_MEASUREMENTS, cohorts=True,
              groups=_non_private),
)

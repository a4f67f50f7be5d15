"""The registry: one record per algorithm, all a driver needs, in every
setting.

A record says how to build the algorithm (its aggregation factory; for
cross-silo, what each silo does in a round), the options it reads (the
command line defines a flag for each, checks it, and refuses it when no
chosen algorithm reads it), the measurements it reports every round and
whether the printed epsilon covers each (`release_policy.Measurement`, read
by the release policy), and whether it runs in cohorts. Drivers never
compare an algorithm's name: they read its record. A new rule is its factory
file, one record (here, or `register(...)` from user code) and its test; a
record that lacks what its setting needs is refused by `register`.

Trusted server (privacy groups, the server adds the noise): `build_factory`
gets a `TrustedContext` (the privacy plan, clip settings, the run's secret
seed, cohorts or not, the options) and returns a `GroupFactory`: a
`tff.aggregators.WeightedAggregationFactory` whose client weight is the
float32 one-hot group vector, and the noise it applies (`GroupNoise`), which
is what the ledger accounts. `groups` says which privacy groups the
algorithm trains with (the clients' own by default); `privacy_plan` how
their noise and sampling rates are planned (`plans.plan_privacy` by
default: every group at the run's rate; a plan marked `reads_options` also
gets the run's options and the model's size, `Algorithm.plan_privacy`); `sweep` names an option with one
configuration per value (FedHDP's r).

Untrusted server (every client runs DP-SGD at its own epsilon):
`build_factory(**options)` is the server's factory (an unweighted one sees
only the updates, and the client weight is 'none'); `client_weight` is what
a client sends with its update; `min_epsilon` runs every client at the
smallest epsilon.

Cross-silo: `regularized` (lambda applies), `personal_epoch` (Ditto's second
epoch per round), `clustered` (cluster models with private selection, IFCA),
`shared_model` (silos train and deploy the shared model, FedAvg and IFCA),
`first_phase` (shared training first, then personal from where it ended:
for half the rounds, or through the private selection's rounds).

The command line reads this registry for its help and its validation before
TensorFlow is imported, so the built-in factories are named by module and
class and imported when first built (`lazy_factory`).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import Any, Callable, Mapping, Sequence, TYPE_CHECKING

from tff_hdp.privacy import release_policy
from tff_hdp.privacy.release_policy import Measurement

if TYPE_CHECKING:
  import tensorflow_federated as tff
  from tff_hdp.privacy import plans
  from tff_hdp.privacy.privacy_groups import GroupAssignment

TRUSTED = 'trusted'  # client-level DP at the server, privacy groups
UNTRUSTED = 'untrusted'  # every client runs DP-SGD at its own epsilon
CROSS_SILO = 'cross_silo'  # silo-specific sample-level DP
SETTINGS = (TRUSTED, UNTRUSTED, CROSS_SILO)
SETTING_NAMES = {TRUSTED: 'trusted-server', UNTRUSTED: 'untrusted-server',
                 CROSS_SILO: 'cross-silo'}

# What an untrusted-setting client attaches to its update as its weight.
CLIENT_WEIGHTS = ('none', 'inverse_noise_variance', 'epsilon', 'num_examples')
# When a cross-silo algorithm trains the shared model before the personal
# ones: never, for the first half of the rounds, or through the rounds of
# private cluster selection.
FIRST_PHASES = (None, 'half_of_rounds', 'selection_rounds')


def lazy_factory(module: str,
                 name: str) -> Callable[..., tff.aggregators.Factory]:
  """The factory class `module.name` (a dotted name inside `module`),
  imported when first built."""

  def build(**options) -> tff.aggregators.Factory:
    factory = importlib.import_module(module)
    for part in name.split('.'):
      factory = getattr(factory, part)
    return factory(**options)

  build.__name__ = build.__qualname__ = name.rpartition('.')[2]
  return build


_MEAN = lazy_factory('tensorflow_federated', 'aggregators.MeanFactory')


@dataclasses.dataclass(frozen=True)
class Option:
  """A setting an algorithm reads, as a flag `--<name>`.

  `kind` is float or int; a value must lie in [`low`, `high`] (open at
  `low` with `low_open`); None is the default's "not given". With `sweep`
  (trusted setting) the flag is a list, one configuration per value, named
  `<algorithm>_<label><value>` (not given: one configuration, named
  `<algorithm>`, the record's own rule). With `per_level` (trusted setting)
  the flag is a list of one value per private level, in --epsilons order,
  read as a tuple. It is refused beside the options it `excludes`. An
  untrusted rule's factory gets it as the keyword `argument` (default:
  `name`). Algorithms of one setting that read the same option share its
  flag and must declare it alike.
  """

  name: str
  help: str
  kind: type = float
  default: float | int | None = None
  low: float | None = None
  high: float | None = None
  low_open: bool = False
  sweep: bool = False
  label: str = ''
  argument: str = ''  # the factory's keyword for it (default: `name`)
  per_level: bool = False
  excludes: tuple[str, ...] = ()  # options it cannot be given with

  def __post_init__(self):
    if self.kind not in (float, int):
      raise ValueError(f'option {self.name!r}: kind must be float or int.')
    if self.per_level and (self.sweep or self.default is not None):
      raise ValueError(f'option {self.name!r}: a per-level option is not '
                       'swept and has no default (not given: None).')
    if self.sweep and not self.label:
      raise ValueError(f'option {self.name!r}: a swept option needs the '
                       'label that names its configurations.')


@dataclasses.dataclass(frozen=True)
class GroupNoise:
  """The noise a trusted algorithm's factory applies, as its ledger
  accounts it: each group's noise multiplier on its sum (0: no noise, a
  group without guarantee) and the noise std on the clip count (None: the
  clip norm is fixed, so no count is released)."""

  noise_multipliers: tuple[float, ...]
  clip_count_stddev: float | None
  # Without sampling: each group's participation where the factory's noise
  # is accounted under a rule of its own (per-group caps on one stream);
  # None: the run's.
  participations: tuple[Any, ...] | None = None


@dataclasses.dataclass(frozen=True)
class GroupFactory:
  """A trusted algorithm's server rule: the factory, weighted by the
  float32[l] one-hot group vector (cohorts: [None, l]), the noise it
  applies, and whether that noise follows the run's secret seed (so a
  round redone after a resume releases what it released before; if not,
  a run that released rounds past its last checkpoint is not resumed)."""

  factory: tff.aggregators.WeightedAggregationFactory
  noise: GroupNoise
  seeded: bool = False
  # The combination ratios r_j the factory weighs the groups' means with,
  # where it chose them itself (None: the plan's groups' own); the run
  # prints them and its summary records them.
  ratios: tuple[float, ...] | None = None
  # What the run prints about the factory's noise beside its ratios (what
  # its epsilon assumes, what it becomes otherwise).
  notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class TrustedContext:
  """What a trusted algorithm's factory is built from."""

  plan: plans.PrivacyPlan
  clip: plans.ClipSettings
  seed: int  # the DP noise's seed: the run's secret
  cohorts: bool  # clients packed into cohorts (`tff_hdp.learning.cohort`)
  options: Mapping[str, Any]
  num_parameters: int  # the model's trainable parameters (public)
  # Whether the factory reports the exact counts no epsilon covers (the
  # run's --release_unprotected_stats); by default they read NaN.
  release_unprotected_counts: bool = False


def own_groups(choices: GroupAssignment,
               options: Mapping[str, Any]) -> GroupAssignment:
  """The clients' own privacy groups, as they chose them."""
  del options
  return choices


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """One algorithm of one setting (the module docstring says what each
  setting's fields mean)."""

  name: str
  setting: str
  paper_name: str
  build_factory: Callable[..., Any] | None = None
  options: tuple[Option, ...] = ()
  measurements: tuple[Measurement, ...] = ()
  cohorts: bool = False
  # Trusted server.
  groups: Callable[[GroupAssignment, Mapping[str, Any]],
                   GroupAssignment] = own_groups
  sweep: str | None = None
  fixed_clip: bool = False  # the factory never adapts the clip norm
  # How the run's privacy is planned, `plans.plan_privacy`'s arguments to a
  # `PrivacyPlan` (None: plan_privacy, every group at the run's rate).
  privacy_plan: Callable[..., Any] | None = None
  # Untrusted server.
  client_weight: str = 'none'
  min_epsilon: bool = False
  # Cross-silo.
  regularized: bool = False
  personal_epoch: bool = False
  clustered: bool = False
  shared_model: bool = False
  first_phase: str | None = None

  @property
  def device_only(self) -> bool:
    """Whether its privacy plan accounts devices only (`_device_plan`),
    refusing sampled clients."""
    return getattr(self.privacy_plan, 'device_only', False)

  @property
  def poisson_only(self) -> bool:
    """Whether its privacy plan samples each group at its own Poisson
    rate, refusing any other sampling."""
    return getattr(self.privacy_plan, 'poisson_only', False)

  def plan_privacy(self, assignment, sampling, rounds, clip, denominator,
                   *, allow_large_delta: bool, options: Mapping[str, Any],
                   num_parameters: int) -> plans.PrivacyPlan:
    """The run's plan (trusted setting): `privacy_plan`'s, or
    `plans.plan_privacy`; a plan marked `reads_options` also gets the
    run's options and the model's size."""
    # pylint: disable-next=g-import-not-at-top
    from tff_hdp.privacy.plans import plan_privacy
    plan = self.privacy_plan or plan_privacy
    extra = (dict(options=options, num_parameters=num_parameters)
             if getattr(plan, 'reads_options', False) else {})
    return plan(assignment, sampling, rounds, clip, denominator,
                allow_large_delta=allow_large_delta, **extra)

  def __post_init__(self):
    def refuse(why):
      raise ValueError(f'algorithm {self.name!r}: {why}')

    if not self.name or not self.name.replace('_', '').isalnum():
      refuse('its name must be letters, digits and underscores (a flag '
             'value and a folder name).')
    if self.setting not in SETTINGS:
      refuse(f'unknown setting {self.setting!r}; choose from {SETTINGS}.')
    if self.client_weight not in CLIENT_WEIGHTS:
      refuse(f'unknown client weight {self.client_weight!r}; choose from '
             f'{CLIENT_WEIGHTS}.')
    if self.first_phase not in FIRST_PHASES:
      refuse(f'unknown first phase {self.first_phase!r}; choose from '
             f'{FIRST_PHASES}.')
    if (self.setting == CROSS_SILO) == (self.build_factory is not None):
      refuse('trusted and untrusted algorithms, and only they, name a '
             'factory builder (build_factory).' if self.setting != CROSS_SILO
             else 'a cross-silo algorithm is built from its fields, not a '
             'factory.')
    if not all(isinstance(o, Option) for o in self.options):
      refuse('its options must be algorithms.Option records.')
    if not all(isinstance(m, Measurement) for m in self.measurements):
      refuse('its measurements must be release_policy.Measurement records.')
    names = [o.name for o in self.options]
    if len(set(names)) < len(names):
      refuse(f'an option is declared twice in {names}.')
    swept = [o.name for o in self.options if o.sweep]
    if self.setting == TRUSTED:
      if swept != ([self.sweep] if self.sweep else []):
        refuse(f'sweep={self.sweep!r} must name its one swept option '
               f'(declared: {swept}).')
    elif swept or any(o.per_level for o in self.options):
      refuse('only trusted-setting algorithms sweep an option or read one '
             'per privacy level.')
    if self.setting != TRUSTED and (self.sweep or self.fixed_clip or
                                    self.groups is not own_groups or
                                    self.privacy_plan is not None):
      refuse('sweep, fixed_clip, groups and privacy_plan are trusted-setting '
             'fields.')
    if self.setting != UNTRUSTED and (self.client_weight != 'none' or
                                      self.min_epsilon):
      refuse('client_weight and min_epsilon are untrusted-setting fields.')
    if self.setting != CROSS_SILO and (
        self.regularized or self.personal_epoch or self.clustered or
        self.shared_model or self.first_phase):
      refuse('regularized, personal_epoch, clustered, shared_model and '
             'first_phase are cross-silo fields.')
    if self.setting == UNTRUSTED and self.options and (
        self.client_weight != 'none'):
      refuse('options go to the factory of a rule whose client weight is '
             "'none' (the weighted mean takes none).")
    if self.setting == UNTRUSTED and any(
        m.per_group or m.covered != release_policy.COVERED
        for m in self.measurements):
      refuse('an untrusted-setting factory sees only the DP-SGD updates: its '
             'measurements are per run, not per group, and covered.')
    if self.setting == CROSS_SILO and self.measurements:
      refuse('cross-silo rounds report no aggregator measurements.')


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


# Why a `device_only` record refuses any other sampling.
DEVICE_ONLY = ('correlated noise is accounted without sampling, for devices '
               'that enforce their own participation: run it with '
               '--sampling=device (with --min_separation and '
               '--max_participations).')


def _device_plan(noise: Callable[..., Any]) -> Callable[..., Any]:
  """A `privacy_plan` without sampling: `plans.plan_privacy` with each
  private group's sums under the strategy `noise(model)` for the run's
  participation model (`min_separation.DeviceParticipation`). Marked
  `device_only`, so the command line refuses other sampling before
  TensorFlow loads."""

  def plan(assignment, sampling, rounds, *args, **kwargs):
    # pylint: disable=g-import-not-at-top
    from tff_hdp.privacy import min_separation
    from tff_hdp.privacy.plans import plan_privacy
    # pylint: enable=g-import-not-at-top
    if not isinstance(sampling, min_separation.DeviceParticipation):
      raise ValueError(DEVICE_ONLY)
    return plan_privacy(
        assignment, dataclasses.replace(
            sampling, noise=noise(sampling.model(rounds))), rounds, *args,
        **kwargs)

  plan.device_only = True
  return plan


def _blt_noise(model):
  """BLT's Toeplitz strategy for `model` (`blt.parameters_for`)."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import blt
  from tff_hdp.privacy import min_separation
  # pylint: enable=g-import-not-at-top
  return min_separation.ToeplitzNoise(tuple(
      blt.parameters_for(model).coefficients(model.rounds)))


def _tree_noise(model):
  """The online binary tree's strategy (for any `model`)."""
  del model
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import min_separation
  return min_separation.TreeNoise()


def _streams(cohorts: bool):
  """`PerGroupStreamsFactory`, or its cohort twin (whose streams get sums
  of rows it clipped itself)."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.aggregators import per_group_streams
  return (per_group_streams.CohortPerGroupStreamsFactory if cohorts
          else per_group_streams.PerGroupStreamsFactory)


def _plain_stream(clip: float, cohorts: bool):
  """A group without guarantee's stream: a clipped sum (in cohorts the rows
  arrive clipped)."""
  # pylint: disable-next=g-import-not-at-top
  import tensorflow_federated as tff
  if cohorts:
    return tff.aggregators.SumFactory()
  return tff.aggregators.clipping_factory(clip, tff.aggregators.SumFactory())


def _streams_factory(context: TrustedContext) -> GroupFactory:
  """`PerGroupStreamsFactory`: each private group's stream adds the
  correlated noise its plan accounts (BLT's buffers, or TFF's efficient
  tree), a group without guarantee a clipped sum; the groups at the
  noise-aware ratios unless --r or --level_ratios is given."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from tff_hdp.aggregators import blt_noise
  from tff_hdp.aggregators import tree_noise
  from tff_hdp.privacy import blt
  from tff_hdp.privacy import min_separation
  from tff_hdp.privacy.privacy_groups import with_ratios
  # pylint: enable=g-import-not-at-top
  plan = context.plan
  ratios = _noise_aware_ratios(context)
  if ratios is not None:
    plan = dataclasses.replace(
        plan, assignment=with_ratios(plan.assignment, ratios))
  strategy = plan.sampling.noise
  clip = context.clip.initial_norm
  factories = []
  for j, (group, z) in enumerate(zip(plan.assignment.groups,
                                     plan.noise_multipliers)):
    seed = int(np.random.default_rng([context.seed, j, 0x57]).integers(2**62))
    if not group.is_private:
      factories.append(_plain_stream(clip, context.cohorts))
    elif isinstance(strategy, min_separation.TreeNoise):
      factories.append(tree_noise.TreeSumFactory(
          z, clip, seed, clip_updates=not context.cohorts))
    else:
      parameters = blt.parameters_for(plan.sampling.model(plan.rounds))
      if tuple(parameters.coefficients(plan.rounds)) != strategy.coefficients:
        raise ValueError('the BLT parameters differ from the strategy the '
                         'plan accounts.')
      factories.append(blt_noise.BltSumFactory(
          parameters, z, clip, seed, clip_updates=not context.cohorts))
  factory = _streams(context.cohorts)(
      factories, [g.ratio for g in plan.assignment.groups],
      plan.expected_group_sizes, [z * clip for z in plan.noise_multipliers],
      clip, context.release_unprotected_counts)
  return GroupFactory(factory, GroupNoise(plan.noise_multipliers, None),
                      seeded=True, ratios=ratios)


# Why a `poisson_only` record refuses any other sampling.
POISSON_ONLY = ('it samples each privacy group at its own Poisson rate: '
                'run it with --sampling=poisson.')


def _independent_noise(model):
  """Fresh noise every round (for any `model`)."""
  del model
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import min_separation
  return min_separation.IndependentNoise()


def _distributed_noise(group_sum, dim: int, device, z: float):
  """The accounting of `group_sum(z)`, TFF's distributed discrete
  Gaussian at noise multiplier z, for `device`'s participation."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import distributed_group_dp
  from tff_hdp.privacy import distributed_noise
  # pylint: enable=g-import-not-at-top
  sensitivity, local_stddev, padded = distributed_group_dp.built_noise(
      group_sum(z), dim)
  return distributed_noise.DistributedDiscreteGaussian(
      device.population, device.clients_per_round, device.min_separation,
      device.max_participations, device.noise, noise_multiplier=z,
      sensitivity=sensitivity, local_stddev=local_stddev, dim=padded)


def _meeting_target(group, z: float, rounds: int, build, bits: int):
  """(z', its accounting `build(z')`): from `z` up, within 0.01% the least
  noise multiplier whose build meets `group`'s target over `rounds`. TFF's
  scale shrinks as the noise grows, and its rounding inflates the
  sensitivity with it, so each candidate is accounted from its own build;
  at too few bits no noise meets the target."""
  def meets(z):
    with warnings.catch_warnings():  # TFF's, of a small scale: a probe's
      warnings.simplefilter('ignore')
      noise = build(z)
    return noise.epsilon_spent(z, None, rounds,
                               group.delta) <= group.epsilon, noise

  ok, noise = meets(z)
  if ok:
    return z, noise
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
        f'--ddp_bits={bits}: rounding to {bits} bits inflates the '
        'sensitivity as fast as the noise grows, so that no noise multiplier '
        f'meets privacy group {group.name!r}\'s target; raise --ddp_bits.')
  while high > low * 1.0001:
    middle = (low + high) / 2
    ok, noise = meets(middle)
    if ok:
      high, found = middle, noise
    else:
      low = middle
  return high, found


def _distributed_factory(context: TrustedContext) -> GroupFactory:
  """`DistributedGroupDPFactory`: each private group's sum through TFF's
  distributed discrete Gaussian at --ddp_bits, its noise multiplier the
  least (from the plan's Gaussian one up) whose distributed noise, as TFF
  builds it, meets the group's target; the groups at the noise-aware
  ratios of those multipliers unless --r or --level_ratios is given."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import distributed_group_dp
  from tff_hdp.privacy.privacy_groups import with_ratios
  # pylint: enable=g-import-not-at-top
  plan = context.plan
  device = plan.sampling
  bits = context.options['ddp_bits']
  clip = context.clip.initial_norm

  def group_sum(z):
    try:
      return distributed_group_dp.group_sum_factory(
          z, device.clients_per_round, bits, clip)
    except ValueError as e:
      raise ValueError(f'--ddp_bits={bits}: {e}') from None

  multipliers, accounted = [], []
  notes = [f'distributed discrete Gaussian at {bits} bits: every one of a '
           f'round\'s {device.clients_per_round} devices sends '
           f'{plan.assignment.num_groups} slots (its clipped update in its '
           'group\'s, zeros elsewhere) and a noise share in each private '
           'slot; the server learns the noisy group sums and the groups\' '
           'counts, not which device is in which group. Each epsilon '
           'assumes every device of a round adds its share.']
  for group, z in zip(plan.assignment.groups, plan.noise_multipliers):
    noise = None
    planned = z
    if group.is_private:
      z, noise = _meeting_target(group, z, plan.rounds, lambda z: (
          _distributed_noise(group_sum, context.num_parameters, device, z)),
                                 bits)
      eps = [noise.epsilon_spent(z, None, plan.rounds, group.delta, f)
             for f in (1.0, 0.9, 0.5)]
      notes.append(
          f'{group.name}: noise multiplier {z:.4g} (the central Gaussian\'s '
          f'{planned:.4g}), eps {eps[0]:.3g}; if only 90% of a round\'s '
          f'devices finish, {eps[1]:.3g}; if half, {eps[2]:.3g}')
    multipliers.append(z)
    accounted.append(noise)
  plan = dataclasses.replace(plan, noise_multipliers=tuple(multipliers))
  ratios = _noise_aware_ratios(dataclasses.replace(context, plan=plan))
  if ratios is not None:
    plan = dataclasses.replace(
        plan, assignment=with_ratios(plan.assignment, ratios))
  factory = distributed_group_dp.DistributedGroupDPFactory(
      multipliers, [g.ratio for g in plan.assignment.groups],
      plan.expected_group_sizes, clip, bits, device.clients_per_round,
      context.release_unprotected_counts)
  return GroupFactory(factory, GroupNoise(tuple(multipliers), None,
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
  from tff_hdp.aggregators import blt_noise
  from tff_hdp.aggregators import merged_groups
  from tff_hdp.privacy import blt
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
  parameters = blt.parameters_for(sampling.model(plan.rounds))
  inner = _streams(context.cohorts)(
      [blt_noise.BltSumFactory(parameters, z, clip, seed,
                               clip_updates=not context.cohorts)] +
      [_plain_stream(clip, context.cohorts)] * others, merged.ratios,
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
    'ddp_bits', 'fedhdp_ddp: the bit width of each group\'s secure sum '
    '(TFF\'s DistributedDpSumFactory bits): the noisy integer sum of a '
    'round\'s clients must fit in it.', kind=int, default=16, low=1,
    high=22)
RPCA_FREEZE = Option(
    'rpca_freeze_after_round', 'Robust-HDP: estimate the weights by RPCA in '
    'rounds 1..k only and reuse round k\'s after, as its authors\' code does '
    '(not given: every round, its Algorithm 1).', kind=int, low=1,
    argument='freeze_after_round')

REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm('fedhdp', TRUSTED, 'FedHDP', _fedhdp_noise_aware_factory,
              (RATIO, LEVEL_RATIOS, HETEROGENEITY), _FEDHDP_MEASUREMENTS,
              cohorts=True, groups=_with_ratio, sweep='r'),
    Algorithm('fedhdp_blt', TRUSTED, 'FedHDP with per-group BLT noise',
              _streams_factory, (RATIO, LEVEL_RATIOS, HETEROGENEITY),
              _STREAM_MEASUREMENTS, cohorts=True, groups=_with_ratio,
              sweep='r',
              fixed_clip=True, privacy_plan=_device_plan(_blt_noise)),
    Algorithm('fedhdp_tree', TRUSTED, 'FedHDP with a tree per group',
              _streams_factory, (RATIO, LEVEL_RATIOS, HETEROGENEITY),
              _STREAM_MEASUREMENTS, cohorts=True, groups=_with_ratio,
              sweep='r', fixed_clip=True,
              privacy_plan=_device_plan(_tree_noise)),
    Algorithm('fedhdp_ddp', TRUSTED,
              'FedHDP with per-group distributed discrete Gaussian',
              _distributed_factory,
              (RATIO, LEVEL_RATIOS, HETEROGENEITY, DDP_BITS),
              _STREAM_MEASUREMENTS, groups=_with_ratio, sweep='r',
              fixed_clip=True,
              privacy_plan=_device_plan(_independent_noise)),
    Algorithm('blt_shared', TRUSTED,
              'one BLT stream, devices capped per level',
              _capped_stream_factory, (LEVEL_PARTICIPATIONS, HETEROGENEITY),
              _STREAM_MEASUREMENTS[:1], cohorts=True, fixed_clip=True,
              privacy_plan=_device_plan(_blt_noise)),
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
    Algorithm('robust_hdp', UNTRUSTED, 'Robust-HDP',
              lazy_factory('tff_hdp.aggregators.robust_hdp',
                           'RobustHDPFactory'), (RPCA_FREEZE,),
              (Measurement('weights_frozen', 'weights_frozen', kind=int),
               Measurement('rpca_converged', 'rpca_converged', kind=int),
               Measurement('rpca_iterations', 'rpca_iterations', kind=int))),
    Algorithm('oracle', UNTRUSTED, 'inverse noise variance (oracle)', _MEAN,
              client_weight='inverse_noise_variance'),
    Algorithm('weiavg', UNTRUSTED, 'WeiAvg', _MEAN, client_weight='epsilon'),
    Algorithm('dpfedavg', UNTRUSTED, 'DPFedAvg', _MEAN,
              client_weight='num_examples'),
    Algorithm('pfa', UNTRUSTED, 'PFA',
              lazy_factory('tff_hdp.aggregators.pfa', 'PFAFactory'),
              measurements=tuple(
                  Measurement(m, m, kind=int) for m in (
                      'num_public', 'num_private', 'mixture_converged',
                      'mixture_iterations'))),
    Algorithm('min_epsilon', UNTRUSTED, 'minimum epsilon', _MEAN,
              client_weight='num_examples', min_epsilon=True),
    Algorithm('median', UNTRUSTED, 'coordinate-wise median',
              lazy_factory('tff_hdp.aggregators.coordinate_median',
                           'CoordinateMedianFactory')),
    Algorithm('local', CROSS_SILO, 'local training', cohorts=True),
    Algorithm('fedavg', CROSS_SILO, 'FedAvg', cohorts=True, shared_model=True),
    Algorithm('finetune', CROSS_SILO, 'FedAvg + finetuning', cohorts=True,
              first_phase='half_of_rounds'),
    Algorithm('mrmtl', CROSS_SILO, 'MR-MTL', cohorts=True, regularized=True),
    Algorithm('ditto', CROSS_SILO, 'Ditto', cohorts=True, regularized=True,
              personal_epoch=True),
    Algorithm('ifca', CROSS_SILO, 'IFCA', cohorts=True, clustered=True,
              shared_model=True),
    Algorithm('ifca_mrmtl', CROSS_SILO, 'IFCA + MR-MTL', cohorts=True,
              regularized=True, clustered=True,
              first_phase='selection_rounds'),
)}


def register(algorithm: Algorithm) -> None:
  """Adds `algorithm`, selectable by name from then on (call it before the
  command line's `run()`, which defines the flags of its options).

  Raises:
    TypeError: `algorithm` is not an `Algorithm` record.
    ValueError: an algorithm of that name exists, or one of its setting
      declares an option of the same name otherwise.
  """
  if not isinstance(algorithm, Algorithm):
    raise TypeError(f'register takes an algorithms.Algorithm record, got '
                    f'{type(algorithm).__name__}.')
  if algorithm.name in REGISTRY:
    raise ValueError(f'an algorithm named {algorithm.name!r} exists.')
  for option in algorithm.options:
    other = setting_options(algorithm.setting).get(option.name)
    if other is not None and other != option:
      raise ValueError(
          f'algorithm {algorithm.name!r}: option {option.name!r} is declared '
          f'otherwise by another {algorithm.setting} algorithm ({other}); '
          'give it another name or the same declaration.')
  REGISTRY[algorithm.name] = algorithm


def names(setting: str) -> tuple[str, ...]:
  """The names of `setting`'s algorithms, in registry order."""
  return tuple(a.name for a in REGISTRY.values() if a.setting == setting)


def find(name: str, setting: str) -> Algorithm | None:
  """The record of `setting`'s algorithm `name`, or None."""
  algorithm = REGISTRY.get(name)
  return algorithm if algorithm and algorithm.setting == setting else None


def record(name: str, setting: str) -> Algorithm:
  """The record of `setting`'s algorithm `name`; a ValueError naming the
  choices otherwise."""
  algorithm = find(name, setting)
  if algorithm is None:
    raise ValueError(f'unknown {SETTING_NAMES[setting]} algorithm {name!r}; '
                     f'choose one of {", ".join(names(setting))}.')
  return algorithm


def setting_options(setting: str) -> dict[str, Option]:
  """Every option `setting`'s algorithms read, by name."""
  return {o.name: o for a in REGISTRY.values() if a.setting == setting
          for o in a.options}


def factory_options(algorithm: Algorithm,
                    values: Mapping[str, Any]) -> dict[str, Any]:
  """The keyword arguments `algorithm`'s factory gets of option `values`
  (by option name), its defaults where a value is missing."""
  return {o.argument or o.name: values.get(o.name, o.default)
          for o in algorithm.options}


def readers(setting: str, option: str) -> tuple[str, ...]:
  """The names of `setting`'s algorithms that read `option`."""
  return tuple(a.name for a in REGISTRY.values() if a.setting == setting
               and any(o.name == option for o in a.options))

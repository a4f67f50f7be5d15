"""The record types of the registry (`tff_hdp.learning.algorithms`): an
algorithm's record, the options it reads, and what a trusted algorithm's
factory is built from and returns.

They are apart from the registry's entries so that a rule written in user
code names the same types the built-in rules do, and so that the command
line can read every record before TensorFlow loads (nothing here imports
it). The registry's docstring says what each setting's fields mean.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping, TYPE_CHECKING

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



@dataclasses.dataclass(frozen=True)
class Option:
  """A setting an algorithm reads, as a flag `--<name>`.

  `kind` is float or int; a value must lie in [`low`, `high`] (open at
  `low` with `low_open`); None is the default's "not given". Or `kind` is
  str, a value one of `choices`. With `sweep`
  (trusted setting) the flag is a list, one configuration per value, named
  `<algorithm>_<label><value>` (not given: one configuration, named
  `<algorithm>`, the record's own rule). With `per_level` (trusted setting)
  the flag is a list of one value per private level, in --epsilons order,
  read as a tuple (an int option's of whole numbers); with `one_for_all`
  too, one value is every level's, and it may have a default. It is
  refused beside the options it `excludes`. An
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
  one_for_all: bool = False  # per level: one value is every level's
  excludes: tuple[str, ...] = ()  # options it cannot be given with
  choices: tuple[str, ...] = ()  # a str option's values

  def __post_init__(self):
    if self.kind not in (float, int, str):
      raise ValueError(f'option {self.name!r}: kind must be float, int or '
                       'str.')
    if (self.kind is str) != bool(self.choices):
      raise ValueError(f'option {self.name!r}: a str option, and only it, '
                       'lists its choices.')
    if self.kind is str and (self.sweep or self.per_level or
                             self.default not in self.choices):
      raise ValueError(f'option {self.name!r}: a str option is not swept or '
                       'per level, and its default is one of its choices.')
    if self.one_for_all and not self.per_level:
      raise ValueError(f'option {self.name!r}: one_for_all is a per-level '
                       'option\'s.')
    if self.per_level and (self.sweep or (self.default is not None and
                                          not self.one_for_all)):
      raise ValueError(f'option {self.name!r}: a per-level option is not '
                       'swept and has no default (not given: None) unless '
                       'one value may be every level\'s (one_for_all).')
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
  """One algorithm of one setting (`tff_hdp.learning.algorithms`' docstring
  says what each setting's fields mean)."""

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
    """Whether its privacy plan accounts devices only
    (`correlated_noise.device_plan`), refusing sampled clients."""
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


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

The record types are in `tff_hdp.learning.records`, the built-in trusted
rules' wiring in `tff_hdp.learning.trusted_rules`, and the seams of a rule
with noise correlated over rounds in `tff_hdp.learning.correlated_noise`;
the names user code reaches them by stay importable from here. The command
line reads this registry for its help and its validation before TensorFlow
is imported, so the built-in factories are named by module and class and
imported when first built (`lazy_factory`).
"""

from __future__ import annotations

from typing import Any, Mapping

from tff_hdp.learning import trusted_rules
# The public names of the records, the built-in trusted rules' options and
# refusals, as user code and the drivers have reached them from here.
# pylint: disable=unused-import
from tff_hdp.learning.correlated_noise import DEVICE_ONLY
from tff_hdp.learning.records import Algorithm
from tff_hdp.learning.records import CLIENT_WEIGHTS
from tff_hdp.learning.records import CROSS_SILO
from tff_hdp.learning.records import FIRST_PHASES
from tff_hdp.learning.records import GroupFactory
from tff_hdp.learning.records import GroupNoise
from tff_hdp.learning.records import lazy_factory
from tff_hdp.learning.records import Option
from tff_hdp.learning.records import own_groups
from tff_hdp.learning.records import SETTING_NAMES
from tff_hdp.learning.records import SETTINGS
from tff_hdp.learning.records import TRUSTED
from tff_hdp.learning.records import TrustedContext
from tff_hdp.learning.records import UNTRUSTED
from tff_hdp.learning.trusted_rules import check_ddp_bits
from tff_hdp.learning.trusted_rules import check_level_participations
from tff_hdp.learning.trusted_rules import DDP_BITS
from tff_hdp.learning.trusted_rules import DDP_MECHANISM
from tff_hdp.learning.trusted_rules import HETEROGENEITY
from tff_hdp.learning.trusted_rules import LEVEL_PARTICIPATIONS
from tff_hdp.learning.trusted_rules import LEVEL_RATIOS
from tff_hdp.learning.trusted_rules import MAX_RATIO
from tff_hdp.learning.trusted_rules import POISSON_ONLY
from tff_hdp.learning.trusted_rules import RATIO
from tff_hdp.learning.trusted_rules import TILT
# pylint: enable=unused-import
from tff_hdp.privacy.release_policy import Measurement

_MEAN = lazy_factory('tensorflow_federated', 'aggregators.MeanFactory')

RPCA_FREEZE = Option(
    'rpca_freeze_after_round', 'Robust-HDP: estimate the weights by RPCA in '
    'rounds 1..k only and reuse round k\'s after, as its authors\' code does '
    '(not given: every round, its Algorithm 1).', kind=int, low=1,
    argument='freeze_after_round')

REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    *trusted_rules.RECORDS,
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
"""The registry: one record per algorithm, read by the command line, the
three settings' drivers and the tables.

A new server rule for the untrusted setting is its factory file in
`tff_hdp/aggregators/`, one record here (or a `register` call from user
code) and its test; no driver changes. Trusted-server algorithms differ in the
privacy groups they train with (`fedhdp.groups_for_algorithm`); cross-silo
algorithms in how they use the common round (`cross_silo_process`).

The command line reads this registry for its help and its validation before
TensorFlow is imported, so the built-in factories are named by module and
class and imported when first built (`lazy_factory`).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable, TYPE_CHECKING

if TYPE_CHECKING:
  import tensorflow_federated as tff

TRUSTED = 'trusted'  # client-level DP at the server, privacy groups
UNTRUSTED = 'untrusted'  # every client runs DP-SGD at its own epsilon
CROSS_SILO = 'cross_silo'  # silo-specific sample-level DP
SETTINGS = (TRUSTED, UNTRUSTED, CROSS_SILO)

# What an untrusted-setting client attaches to its update as its weight.
CLIENT_WEIGHTS = ('none', 'inverse_noise_variance', 'epsilon', 'num_examples')


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
class Algorithm:
  """One algorithm of one setting.

  Untrusted setting: `build_factory(**options)` is the server's aggregation
  factory (an unweighted one sees only the updates, and the client weight is
  'none'); `client_weight` is what a client sends with its update;
  `min_epsilon` runs every client at the smallest epsilon;
  `round_measurements` are the factory's whole-number measurements (counts,
  flags) that rounds.csv reports every round. Cross-silo:
  `regularized` (lambda applies), `personal_epoch` (Ditto's second epoch per
  round), `clustered` (cluster models with private selection, IFCA).
  """

  name: str
  setting: str
  paper_name: str
  build_factory: Callable[..., tff.aggregators.Factory] | None = None
  client_weight: str = 'none'
  min_epsilon: bool = False
  round_measurements: tuple[str, ...] = ()
  regularized: bool = False
  personal_epoch: bool = False
  clustered: bool = False

  def __post_init__(self):
    if self.setting not in SETTINGS:
      raise ValueError(f'algorithm {self.name!r}: unknown setting '
                       f'{self.setting!r}; choose from {SETTINGS}.')
    if self.client_weight not in CLIENT_WEIGHTS:
      raise ValueError(f'algorithm {self.name!r}: unknown client weight '
                       f'{self.client_weight!r}; choose from {CLIENT_WEIGHTS}.')
    if (self.setting == UNTRUSTED) != (self.build_factory is not None):
      raise ValueError(f'algorithm {self.name!r}: untrusted-setting '
                       'algorithms, and only they, name a factory.')


REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm('fedhdp', TRUSTED, 'FedHDP'),
    Algorithm('dp_fedavg', TRUSTED, 'DP-FedAvg'),
    Algorithm('nonprivate', TRUSTED, 'FedAvg'),
    Algorithm('robust_hdp', UNTRUSTED, 'Robust-HDP',
              lazy_factory('tff_hdp.aggregators.robust_hdp',
                           'RobustHDPFactory'),
              round_measurements=('weights_frozen', 'rpca_converged',
                                  'rpca_iterations')),
    Algorithm('oracle', UNTRUSTED, 'inverse noise variance (oracle)', _MEAN,
              'inverse_noise_variance'),
    Algorithm('weiavg', UNTRUSTED, 'WeiAvg', _MEAN, 'epsilon'),
    Algorithm('dpfedavg', UNTRUSTED, 'DPFedAvg', _MEAN, 'num_examples'),
    Algorithm('pfa', UNTRUSTED, 'PFA',
              lazy_factory('tff_hdp.aggregators.pfa', 'PFAFactory'),
              round_measurements=('num_public', 'num_private',
                                  'mixture_converged', 'mixture_iterations')),
    Algorithm('min_epsilon', UNTRUSTED, 'minimum epsilon', _MEAN,
              'num_examples', min_epsilon=True),
    Algorithm('median', UNTRUSTED, 'coordinate-wise median',
              lazy_factory('tff_hdp.aggregators.coordinate_median',
                           'CoordinateMedianFactory')),
    Algorithm('local', CROSS_SILO, 'local training'),
    Algorithm('fedavg', CROSS_SILO, 'FedAvg'),
    Algorithm('finetune', CROSS_SILO, 'FedAvg + finetuning'),
    Algorithm('mrmtl', CROSS_SILO, 'MR-MTL', regularized=True),
    Algorithm('ditto', CROSS_SILO, 'Ditto', regularized=True,
              personal_epoch=True),
    Algorithm('ifca', CROSS_SILO, 'IFCA', clustered=True),
    Algorithm('ifca_mrmtl', CROSS_SILO, 'IFCA + MR-MTL', regularized=True,
              clustered=True),
)}


def register(algorithm: Algorithm) -> None:
  """Adds `algorithm`, selectable by name from then on.

  Raises:
    ValueError: an algorithm of that name exists.
  """
  if algorithm.name in REGISTRY:
    raise ValueError(f'an algorithm named {algorithm.name!r} exists.')
  REGISTRY[algorithm.name] = algorithm


def names(setting: str) -> tuple[str, ...]:
  """The names of `setting`'s algorithms, in registry order."""
  return tuple(a.name for a in REGISTRY.values() if a.setting == setting)


def find(name: str, setting: str) -> Algorithm | None:
  """The record of `setting`'s algorithm `name`, or None."""
  algorithm = REGISTRY.get(name)
  return algorithm if algorithm and algorithm.setting == setting else None

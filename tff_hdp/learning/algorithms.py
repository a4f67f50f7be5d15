"""The registry: one record per algorithm, read by the command line, the
three settings' drivers and the tables.

A new server rule for the untrusted setting is its factory file in
`tff_hdp/aggregators/`, one record here (or a `register` call from user
code) and its test; no driver changes. Trusted-server algorithms differ in the
privacy groups they train with (`fedhdp.groups_for_algorithm`); cross-silo
methods in how they use the common round (`cross_silo_process`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow_federated as tff

from tff_hdp.aggregators.coordinate_median import CoordinateMedianFactory
from tff_hdp.aggregators.pfa import PFAFactory
from tff_hdp.aggregators.robust_hdp import RobustHDPFactory

TRUSTED = 'trusted'  # client-level DP at the server, privacy groups
UNTRUSTED = 'untrusted'  # every client runs DP-SGD at its own epsilon
CROSS_SILO = 'cross_silo'  # silo-specific sample-level DP
SETTINGS = (TRUSTED, UNTRUSTED, CROSS_SILO)

# What an untrusted-setting client attaches to its update as its weight.
CLIENT_WEIGHTS = ('none', 'inverse_noise_variance', 'epsilon', 'num_examples')


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """One algorithm of one setting.

  Untrusted setting: `build_factory(**options)` is the server's aggregation
  factory (an unweighted one sees only the updates, and the client weight is
  'none'); `client_weight` is what a client sends with its update;
  `min_epsilon` runs every client at the smallest epsilon. Cross-silo:
  `regularized` (lambda applies), `personal_epoch` (Ditto's second epoch per
  round), `clustered` (cluster models with private selection, IFCA).
  """

  name: str
  setting: str
  paper_name: str
  build_factory: Callable[..., tff.aggregators.Factory] | None = None
  client_weight: str = 'none'
  min_epsilon: bool = False
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
    Algorithm('robust_hdp', UNTRUSTED, 'Robust-HDP', RobustHDPFactory),
    Algorithm('oracle', UNTRUSTED, 'inverse noise variance (oracle)',
              tff.aggregators.MeanFactory, 'inverse_noise_variance'),
    Algorithm('weiavg', UNTRUSTED, 'WeiAvg', tff.aggregators.MeanFactory,
              'epsilon'),
    Algorithm('dpfedavg', UNTRUSTED, 'DPFedAvg', tff.aggregators.MeanFactory,
              'num_examples'),
    Algorithm('pfa', UNTRUSTED, 'PFA', PFAFactory),
    Algorithm('min_epsilon', UNTRUSTED, 'minimum epsilon',
              tff.aggregators.MeanFactory, 'num_examples', min_epsilon=True),
    Algorithm('median', UNTRUSTED, 'coordinate-wise median',
              CoordinateMedianFactory),
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

"""Clients' privacy budgets and memory budgets, drawn reproducibly by seed.

Untrusted-server experiments (SPEC.md §3) give every client its own epsilon
and its own batch size. The epsilon distributions are the mixtures of Gaussians
of PFA / PDP-FL (MixGauss1-3) and a uniform range; batch sizes are uniform over
{16, 32, 64, 128} as in Robust-HDP. Robust-HDP's own nine distributions (its
Table 4) are in the paper's appendix, which the shared copy does not include,
so they are not reproduced here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

BATCH_SIZES = (16, 32, 64, 128)


@dataclasses.dataclass(frozen=True)
class GaussianMixture:
  """A mixture of Gaussians over epsilon, truncated to epsilon > 0.

  `stddevs` are standard deviations (numpy's `scale`), the reading under which
  the published components `N(0.1, 0.01)` stay positive.
  """

  means: tuple[float, ...]
  stddevs: tuple[float, ...]
  weights: tuple[float, ...]

  def __post_init__(self):
    if not len(self.means) == len(self.stddevs) == len(self.weights) > 0:
      raise ValueError('a mixture needs as many means, stddevs and weights, '
                       'and at least one component.')
    if any(w < 0 for w in self.weights) or not np.isclose(
        sum(self.weights), 1.0):
      raise ValueError(f'mixture weights must be >= 0 and sum to 1, got '
                       f'{self.weights}.')


@dataclasses.dataclass(frozen=True)
class Uniform:
  """Epsilon uniform on [low, high]."""

  low: float
  high: float

  def __post_init__(self):
    if not 0 < self.low <= self.high:
      raise ValueError(f'need 0 < low <= high, got {self.low}, {self.high}.')


EPSILON_DISTRIBUTIONS = {
    'mixgauss1': GaussianMixture((0.1, 10.0), (0.01, 0.1), (0.9, 0.1)),
    'mixgauss2': GaussianMixture((1.0, 10.0), (0.1, 0.1), (0.9, 0.1)),
    'mixgauss3': GaussianMixture((0.1, 1.0, 10.0), (0.01, 0.1, 1.0),
                                 (0.5, 0.4, 0.1)),
}


def component_counts(weights, num_clients: int) -> np.ndarray:
  """`num_clients` split by `weights`, largest remainders rounded up."""
  exact = np.asarray(weights, float) * num_clients
  counts = np.floor(exact).astype(int)
  order = np.argsort(-(exact - counts), kind='stable')
  counts[order[:num_clients - counts.sum()]] += 1
  return counts


def sample_epsilons(distribution: GaussianMixture | Uniform, num_clients: int,
                    seed: int,
                    stratified: bool = True) -> tuple[np.ndarray, np.ndarray]:
  """Epsilons of `num_clients` clients, and each one's mixture component.

  With `stratified`, component sizes are the mixture weights times
  `num_clients` (rounded), so that ten clients of MixGauss1 are nine private
  and one public as in the papers, rather than sometimes none public; without
  it, components are drawn independently. A uniform distribution is one
  component. Non-positive draws are redrawn.
  """
  if num_clients < 1:
    raise ValueError(f'need at least one client, got {num_clients}.')
  rng = np.random.default_rng(seed)
  if isinstance(distribution, Uniform):
    return (rng.uniform(distribution.low, distribution.high, num_clients),
            np.zeros(num_clients, int))
  k = len(distribution.weights)
  if stratified:
    components = rng.permutation(
        np.repeat(np.arange(k), component_counts(distribution.weights,
                                                 num_clients)))
  else:
    components = rng.choice(k, num_clients, p=distribution.weights)
  means = np.asarray(distribution.means)[components]
  stddevs = np.asarray(distribution.stddevs)[components]
  eps = rng.normal(means, stddevs)
  while np.any(eps <= 0):
    bad = eps <= 0
    eps[bad] = rng.normal(means[bad], stddevs[bad])
  return eps, components


def sample_batch_sizes(num_clients: int, seed: int,
                       choices=BATCH_SIZES) -> np.ndarray:
  """Each client's batch size, uniform over `choices`."""
  return np.random.default_rng(seed).choice(np.asarray(choices), num_clients)

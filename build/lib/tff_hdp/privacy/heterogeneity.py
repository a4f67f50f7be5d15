"""Clients' privacy budgets and memory budgets, drawn reproducibly by seed.

Untrusted-server experiments (SPEC.md §3) give every client its own epsilon
and its own batch size. The epsilon distributions are the mixtures of Gaussians
of PFA / PDP-FL (MixGauss1-3) and a uniform range, with batch sizes uniform
over {16, 32, 64, 128}; and Robust-HDP's nine client lists Dist1-Dist9, which
fix both for 20, 40 or 60 clients (`robust_hdp_budgets`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_hdp.privacy import robust_hdp_budgets

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


# The names `client_budgets` draws by seed, for any number of clients.
DRAWN_DISTRIBUTIONS = tuple(EPSILON_DISTRIBUTIONS) + ('uniform',)
# Every name `client_budgets` takes (the CLI's --epsilon_distribution).
DISTRIBUTIONS = DRAWN_DISTRIBUTIONS + tuple(robust_hdp_budgets.EPSILONS)


def client_budgets(name: str, num_clients: int,
                   seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Each client's epsilon and batch size under distribution `name`.

  A drawn distribution (MixGauss1-3, `uniform` on [1, 10]) draws epsilons and
  batch sizes by `seed`; a Robust-HDP list (`dist1`..`dist9`) is fixed and
  exists only for 20, 40 or 60 clients, so another count is a ValueError
  rather than a silently truncated or recycled list.
  """
  if name in robust_hdp_budgets.EPSILONS:
    lists = robust_hdp_budgets.EPSILONS[name]
    if num_clients not in lists:
      raise ValueError(
          f'--epsilon_distribution={name} lists {sorted(lists)} clients '
          f'(Robust-HDP\'s lists); the task has {num_clients} (set '
          '--num_clients, or pick a drawn distribution: '
          f'{", ".join(DRAWN_DISTRIBUTIONS)}).')
    return (np.asarray(lists[num_clients], float),
            np.asarray(robust_hdp_budgets.BATCH_SIZES[num_clients]))
  if name == 'uniform':
    distribution = Uniform(1.0, 10.0)
  elif name in EPSILON_DISTRIBUTIONS:
    distribution = EPSILON_DISTRIBUTIONS[name]
  else:
    raise ValueError(f'unknown epsilon distribution {name!r}; choose one of '
                     f'{DISTRIBUTIONS}.')
  return (sample_epsilons(distribution, num_clients, seed)[0],
          sample_batch_sizes(num_clients, seed))

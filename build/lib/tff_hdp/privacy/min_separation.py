"""Privacy without sampling: participation capped by the device, not drawn.

Under DP-FTRL's participation model (Kairouz et al. 2021; Gboard, Xu et al.
2023) nothing is sampled: a device takes part at most `k` times in the `n`
rounds, and two of its rounds are at least `b` apart (it checks in again only
`b` rounds later). The guarantee comes from correlated noise alone: the server
releases `C x + z` for a strategy matrix `C` (a binary tree, or a Toeplitz
matrix such as BLT's) and Gaussian `z` of standard deviation `noise * clip`.
That release is one Gaussian mechanism whose sensitivity is the largest
`||C sum_{t in P} e_t||` over the participation patterns `P` the model
allows, so its privacy is exactly a Gaussian's, `mu = sensitivity / noise`
(mu-GDP; zCDP rho = mu^2 / 2), with no amplification to lean on.

Convention: `b` is the smallest difference between two rounds of one device
(rounds t and t + b may both hold it). TF Privacy's tree accountant counts the
rounds strictly between (`min_separation = b - 1`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import dp_accounting
import numpy as np
import scipy.optimize

from tff_hdp.privacy import accounting
from tff_hdp.privacy import empirical_epsilon


@dataclasses.dataclass(frozen=True)
class MinSeparation:
  """At most `max_participations` of `rounds`, any two at least
  `min_separation` rounds apart."""

  rounds: int
  min_separation: int
  max_participations: int

  def __post_init__(self):
    for name in ('rounds', 'min_separation', 'max_participations'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be at least 1, got '
                         f'{getattr(self, name)}.')

  @property
  def reachable_participations(self) -> int:
    """The most participations `rounds` can hold at this separation."""
    return min(self.max_participations,
               (self.rounds - 1) // self.min_separation + 1)

  def allows(self, rounds_of_one_device) -> bool:
    """Whether one device's sorted rounds fit the model."""
    r = list(rounds_of_one_device)
    return (len(r) <= self.max_participations and
            all(0 <= t < self.rounds for t in r) and
            all(v - u >= self.min_separation for u, v in zip(r, r[1:])))


def _max_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """(max, +) product: out[s, u] = max_j a[s, j] + b[j, u]. The tables hold
  sums of squared counts, whole numbers far below 2^24: exact in float32,
  which halves the memory traffic of float64."""
  out = np.full((a.shape[0], b.shape[1]), -np.inf, dtype=np.float32)
  if np.isneginf(a).all() or np.isneginf(b).all():  # m out of reach
    return out
  rows = max(1, 2 ** 22 // (a.shape[1] * b.shape[1]))  # bounded memory
  for start in range(0, a.shape[0], rows):
    block = a[start:start + rows, :, None] + b[None, :, :]
    out[start:start + rows] = block.max(axis=1)
  return out


def _concatenate(left: list[np.ndarray], right: list[np.ndarray],
                 k: int) -> list[np.ndarray]:
  """Two adjacent stretches of rounds: m participations split every way."""
  return [np.max([_max_plus(left[m - i], right[i]) for i in range(m + 1)],
                 axis=0) for m in range(k + 1)]


def _empty_block(size: int, b: int) -> np.ndarray:
  """No participation: the block only passes the pending wait along."""
  out = np.full((b, b), -np.inf, dtype=np.float32)
  for s in range(b):
    out[s, max(0, s - size)] = 0.0
  return out


@functools.lru_cache(maxsize=64)
def _complete_tree(h: int, b: int, k: int) -> list[np.ndarray]:
  """The tables of a complete subtree of 2^h rounds (see
  `tree_sensitivity_squared`); shared by every prefix of every run."""
  if h == 0:
    leaf = [_empty_block(1, b)] + [
        np.full((b, b), -np.inf, dtype=np.float32) for _ in range(k)]
    leaf[1][0, b - 1] = 1.0  # a device in the block's only round
    return leaf
  half = _complete_tree(h - 1, b, k)
  return [table + m * m
          for m, table in enumerate(_concatenate(half, half, k))]


# A run asks for rounds 1, 2, 3, ... in turn: each prefix extends the one
# without its lowest set bit, which is cached, by one complete subtree, so a
# round costs one concatenation instead of the whole tree (at es-ES's
# b = 313, about 0.4 s instead of 7 s). The cache holds the binary expansion's
# prefixes of a few groups' runs.
@functools.lru_cache(maxsize=48)
def _tree_prefix(n: int, b: int, k: int) -> list[np.ndarray]:
  """The tables of rounds [0, n): its binary expansion's complete subtrees,
  largest first."""
  low = n & -n
  whole = _complete_tree(low.bit_length() - 1, b, k)
  return whole if n == low else _concatenate(_tree_prefix(n - low, b, k),
                                              whole, k)


@functools.lru_cache(maxsize=4096)  # every prefix of a few groups' runs
def tree_sensitivity_squared(model: MinSeparation) -> float:
  """Worst-case squared sensitivity of the online binary tree.

  The tree releases a noisy sum for every dyadic interval of rounds
  `[j 2^h, (j+1) 2^h)` that lies inside `[0, n)`; a device's contribution to
  the release is `sum_I |P cap I|^2` over those intervals. The maximum over
  patterns P is found exactly by dynamic programming over the dyadic blocks:
  a block's table holds, for m participations, the best value given how many
  of its first rounds the device must still wait out (s) and how many it
  leaves the next block to wait out (u), both below b; adjacent blocks
  combine by a (max, +) product over the wait passed between them, and a
  complete block adds m^2 for its own node.
  """
  n, b, k = model.rounds, model.min_separation, model.reachable_participations
  return float(max(table[0].max() for table in _tree_prefix(n, b, k)))


def toeplitz_sensitivity_squared(coefficients, model: MinSeparation) -> float:
  """Worst-case squared sensitivity of a lower-triangular Toeplitz strategy
  `C[i, j] = c_{i-j}` (BLT's, or any optimal Toeplitz one).

  For non-negative, non-increasing c the worst pattern is the earliest and
  densest one, rounds 0, b, 2b, ... (McMahan et al. 2024, "Efficient and
  near-optimal noise generation for streaming differential privacy",
  Lemma on b-min-separated participation; tested against every pattern at
  small n). Other coefficients are refused, not bounded.
  """
  c = np.asarray(coefficients, dtype=np.float64)
  n, b = model.rounds, model.min_separation
  if c.ndim != 1 or c.size < n:
    raise ValueError(f'need {n} Toeplitz coefficients, got shape {c.shape}.')
  c = c[:n]
  if np.any(c < 0) or np.any(np.diff(c) > 0):
    raise ValueError('Toeplitz coefficients must be non-negative and '
                     'non-increasing for the earliest pattern to be the '
                     'worst; got another sequence.')
  column = np.zeros(n)
  for t in range(0, b * model.reachable_participations, b):
    if t < n:
      column[t:] += c[:n - t]
  return float(column @ column)


def gaussian_epsilon(mu: float, delta: float) -> float:
  """The smallest epsilon of a mu-GDP mechanism at `delta` (the exact
  Gaussian curve of `empirical_epsilon.gaussian_epsilon`)."""
  if not 0 < delta < 1:
    raise ValueError(f'delta must be in (0, 1), got {delta}.')
  if mu <= 0:
    return 0.0
  return empirical_epsilon.gaussian_epsilon(mu, 1.0, 0.0, 1.0, delta)


def gaussian_mu(epsilon: float, delta: float) -> float:
  """The largest mu whose Gaussian mechanism is (epsilon, delta)-DP."""
  if epsilon <= 0:
    raise ValueError(f'epsilon must be positive, got {epsilon}.')
  low, high = 1e-6, 1.0
  while gaussian_epsilon(high, delta) < epsilon:
    high *= 2
  return scipy.optimize.brentq(
      lambda mu: gaussian_epsilon(mu, delta) - epsilon, low, high,
      xtol=1e-12, rtol=1e-12)


def zcdp_epsilon(rho: float, delta: float) -> float:
  """Epsilon of rho-zCDP through dp_accounting's RDP conversion: the
  conversion published DP-FTRL numbers use (looser than `gaussian_epsilon`
  of the same Gaussian, which is exact)."""
  accountant = dp_accounting.rdp.RdpAccountant()
  accountant.compose(dp_accounting.GaussianDpEvent((2 * rho) ** -0.5))
  return accountant.get_epsilon(delta)


def _clip_count_mu2(model: MinSeparation,
                    clip_count_stddev: float | None) -> float:
  """mu^2 of a device's answers to the clip count (see `device_mu`)."""
  if clip_count_stddev is None:
    return 0.0
  if clip_count_stddev <= 0:
    raise ValueError('adaptive clipping needs clip-count noise > 0, got '
                     f'clip_count_stddev={clip_count_stddev}.')
  return model.reachable_participations / (2 * clip_count_stddev) ** 2


def device_mu(model: MinSeparation, sensitivity_squared: float,
              noise_multiplier: float,
              clip_count_stddev: float | None = None) -> float:
  """A device's mu-GDP over the run.

  The strategy's release adds `sensitivity / noise_multiplier`. Adaptive
  clipping's count of unclipped clients is released fresh every round (it is
  not put on the tree): each of the device's participations answers it once
  (a bit centred at 1/2, sensitivity 1/2, noise std `clip_count_stddev`), and
  with no sampling those answers compose without amplification. Gaussian
  mechanisms compose exactly in mu: mu^2 adds up.
  """
  if noise_multiplier <= 0:
    raise ValueError(f'noise multiplier must be > 0, got {noise_multiplier}.')
  return math.sqrt(sensitivity_squared / noise_multiplier ** 2 +
                   _clip_count_mu2(model, clip_count_stddev))


def calibrate_noise_multiplier(target_epsilon: float, delta: float,
                               model: MinSeparation,
                               sensitivity_squared: float,
                               clip_count_stddev: float | None = None) -> float:
  """The least noise multiplier whose release meets (epsilon, delta) for a
  device of `model` (closed form: mu is exact, so no search over z)."""
  mu2 = gaussian_mu(target_epsilon, delta) ** 2
  count2 = _clip_count_mu2(model, clip_count_stddev)
  if count2 >= mu2:
    raise accounting.InfeasiblePrivacyTargetError(
        f'eps {target_epsilon:g} at delta {delta:g} allows mu = '
        f'{math.sqrt(mu2):.4g}, but {model.reachable_participations} answers '
        f'of the clip count (std {clip_count_stddev:g}) already spend '
        f'{math.sqrt(count2):.4g}; raise --clip_count_stddev or allow fewer '
        'participations.')
  return math.sqrt(sensitivity_squared / (mu2 - count2))


@dataclasses.dataclass(frozen=True)
class IndependentNoise:
  """Fresh noise every round (C = I): a device's squared sensitivity is its
  number of participations."""

  def sensitivity_squared(self, model: MinSeparation) -> float:
    return float(model.reachable_participations)


@dataclasses.dataclass(frozen=True)
class TreeNoise:
  """The online binary tree (TF Privacy's tree queries, TFF's
  `tree_aggregation`): `tree_sensitivity_squared`."""

  def sensitivity_squared(self, model: MinSeparation) -> float:
    return tree_sensitivity_squared(model)


@dataclasses.dataclass(frozen=True)
class ToeplitzNoise:
  """A lower-triangular Toeplitz strategy (BLT's `coefficients`, one per
  round of the run): `toeplitz_sensitivity_squared`."""

  coefficients: tuple[float, ...]

  def sensitivity_squared(self, model: MinSeparation) -> float:
    return toeplitz_sensitivity_squared(self.coefficients, model)


NoiseStrategy = IndependentNoise | TreeNoise | ToeplitzNoise


@dataclasses.dataclass(frozen=True)
class DeviceParticipation:
  """Participation without sampling, and what it costs a device.

  Every round the server takes `clients_per_round` of the `population`
  devices that may check in (`tff_hdp.simulation.participation`); each
  device keeps its own rule, at most `max_participations` rounds, any two
  at least `min_separation` apart. The released sums carry noise correlated
  over rounds as `noise` says. Whatever the schedule, as long as no device
  breaks its rule, a device's privacy after t rounds is that of one
  Gaussian mechanism (`device_mu`) under zero-out adjacency: two runs differ
  in one device's updates, replaced by zeros, in rounds its rule allows.
  Nothing is assumed of who the server takes, so nothing is amplified.
  """

  population: int
  clients_per_round: int
  min_separation: int
  max_participations: int
  noise: NoiseStrategy = IndependentNoise()

  def __post_init__(self):
    # The same bounds on the population and the round as sampling's.
    accounting.FixedSizeSampling(self.population, self.clients_per_round)
    self.model(1)  # refuses a separation or a cap below 1

  @property
  def rate(self) -> float:
    """The share of devices a round takes (denominators only: nothing is
    sampled)."""
    return self.clients_per_round / self.population

  def model(self, rounds: int) -> MinSeparation:
    return MinSeparation(rounds, self.min_separation, self.max_participations)

  def epsilon_spent(self, noise_multiplier: float,
                    clip_count_stddev: float | None, rounds: int,
                    delta: float) -> float:
    """A device's epsilon at `delta` for everything released in the first
    `rounds` rounds (the strategy's first rows and the clip counts)."""
    if rounds < 1:
      return 0.0
    model = self.model(rounds)
    return gaussian_epsilon(
        device_mu(model, self.noise.sensitivity_squared(model),
                  noise_multiplier, clip_count_stddev), delta)

  def calibrate(self, target_epsilon: float, delta: float, rounds: int,
                clip_count_stddev: float | None) -> float:
    """The least noise multiplier that meets the target over `rounds`."""
    model = self.model(rounds)
    return calibrate_noise_multiplier(
        target_epsilon, delta, model, self.noise.sensitivity_squared(model),
        clip_count_stddev)

"""What the distributed discrete noise costs a privacy group.

Under secure aggregation each of the round's n clients adds its own share
of discrete noise (std sigma in the integer domain, after TFF's rotation,
scaling and randomized rounding), and the server sees only the sum.
Rounding inflates the clip norm, so a group's epsilon is not the
continuous Gaussian's:

* Discrete Gaussian shares (Kairouz, Liu, Steinke, ICML 2021, Theorem 1
  and Proposition 14): the sum is not a discrete Gaussian. With Delta the
  inflated L2 sensitivity in the integer domain (TFF's
  `scaled_inflated_l2`), d the padded dimension and
  tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1)) (sigma >= 1/2),
  the sum of n shares is RDP at every order alpha with
  eps(alpha) = min(alpha D^2 / 2 + tau d, alpha (D + sqrt(d) tau)^2 / 2),
  D = Delta / (sqrt(n) sigma).
* Skellam shares (Agarwal, Kairouz, Liu, NeurIPS 2021, Theorem 3.5, as
  their accounting code writes it): a sum of Skellams is a Skellam, of
  variance V = n sigma^2, and with Delta_1 the L1 bound (TFF's
  `ceil(Delta min(sqrt(d), Delta))`) it is RDP with
  eps(alpha) = alpha Delta^2 / (2 V)
               + min(((2 alpha - 1) Delta^2 + 6 Delta_1) / (4 V^2),
                     3 Delta_1 / (2 V)).
  Neither TF Privacy nor dp_accounting ships it (TF Privacy's Skellam
  query reports an unsupported DP event).
* Nothing is amplified by sampling: the server that runs secure
  aggregation sees who takes part, and the bounds that amplify a mechanism
  known only by its RDP curve (Wang, Balle, Kasiviswanathan's Theorem 9;
  Zhu and Wang's Poisson bound) keep a floor as the noise grows (Theorem
  9 at q = 0.1 over 100 rounds: epsilon 2.6 at delta 1e-5 however large
  the noise), above the smaller targets here. So
  devices enforce their own participation (`--sampling=device`, zero-out
  adjacency) and a device's participations compose by adding their RDP;
  dp_accounting converts it to (epsilon, delta).

TFF computes Delta, Delta_1, sigma and d for the factory it builds
(`tff_hdp.aggregators.tff_distributed_dp`); this module takes them as
numbers. The bound assumes every one of a round's n clients adds its
share: a round in which only a fraction f of them finish carries f n
shares, and its epsilon is `epsilon_spent(..., finishing=f)`'s. A run
whose rounds had `finished` devices each (`given`, a simulated dropout's)
is accounted at those counts: at each order, a device's RDP is at most
the largest sum over the rounds its participation rule allows it (at
most P rounds, `min_separation` apart; a round nobody finished releases
nothing of anyone).

Where only a group's c members add shares (`members_only`: each of std
sigma sqrt(n / c), so that their sum's variance is the n shares'), the
sum of any c <= n such shares is bounded by the n shares' bound: D is the
same, and tau only shrinks with fewer, larger shares. If at least a
fraction f of the c finish, the sum's variance is at least f n sigma^2,
and its bound is the one at D / sqrt(f) with the n shares' tau.

The bits of the modular sum: TFF refuses a bit width b unless 2^b >= n
and 2^(2b) >= n k^2, k the standard deviations of the sum its modulus
holds (k = 3.89 for a wrap probability of `MODCLIP_PROB`); `min_bits`
is that least b, which the command line checks before TensorFlow loads.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
import statistics
from typing import Sequence

from dp_accounting import rdp
import numpy as np
from scipy import optimize

from tff_hdp.privacy import min_separation

# The fewest of a private group's members whose sum the one-slot variant
# reveals: a sum over one device is that device's own noisy update, which
# secure aggregation is there to hide.
MIN_MEMBERS = 2

# The orders the RDP is converted at.
ORDERS = tuple(range(2, 257))
# The chance that a coordinate of a round's sum wraps around the modulus
# (TFF's default `modclip_prob`).
MODCLIP_PROB = 1e-4


def min_bits(clients_per_round: int,
             modclip_prob: float = MODCLIP_PROB) -> int:
  """The fewest bits TFF's distributed-DP sum accepts for
  `clients_per_round` clients: 2^b >= n, and 2^(2b) >= n k^2 with k the
  standard normal quantile of 1 - modclip_prob / 2."""
  k = statistics.NormalDist().inv_cdf(1 - modclip_prob / 2)
  n = int(clients_per_round)
  bits = max(1, math.ceil(math.log2(n)))
  while 2.0**(2 * bits) < n * k**2:
    bits += 1
  return bits


def sum_tau(local_stddev: float, shares: int) -> float:
  """tau of Kairouz et al.'s Theorem 1 for `shares` discrete Gaussians of
  std `local_stddev` (integer domain): how far their sum is from one."""
  k = np.arange(1, shares, dtype=np.float64)
  return float(10.0 * np.sum(
      np.exp(-2.0 * math.pi**2 * local_stddev**2 * k / (k + 1.0))))


def sum_rdp(orders, scale: float, tau: float, dim: int) -> np.ndarray:
  """eps(alpha) of the discrete Gaussians' sum (Proposition 14, its L2
  terms), `scale` = D = sensitivity / (sqrt(n) sigma)."""
  a = np.asarray(orders, np.float64)
  return np.minimum(a * scale**2 / 2.0 + tau * dim,
                    a * (scale + math.sqrt(dim) * tau)**2 / 2.0)


def skellam_rdp(orders, l2_sensitivity: float, l1_sensitivity: float,
                variance: float) -> np.ndarray:
  """eps(alpha) of the Skellam mechanism of `variance` (integer domain)
  at those sensitivities (Agarwal et al.'s Theorem 3.5)."""
  a = np.asarray(orders, np.float64)
  return a * l2_sensitivity**2 / (2.0 * variance) + np.minimum(
      ((2.0 * a - 1.0) * l2_sensitivity**2 + 6.0 * l1_sensitivity) /
      (4.0 * variance**2), 3.0 * l1_sensitivity / (2.0 * variance))


@dataclasses.dataclass(frozen=True)
class DistributedShares(min_separation.DeviceParticipation, abc.ABC):
  """One private group's devices, and the distributed noise on its sums.

  The participation is `DeviceParticipation`'s (each device at most
  `max_participations` rounds, `min_separation` apart, every round exactly
  `clients_per_round` devices; zero-out adjacency: nothing is amplified,
  so the server may see who takes part). The noise is TFF's build at
  `noise_multiplier`: `sensitivity` and `local_stddev` its
  `scaled_inflated_l2` and `scaled_local_stddev` (integer domain), `dim`
  its padded dimension, one share from each of the round's
  `clients_per_round` devices. A device's epsilon is its participations'
  RDP added up (fresh noise each round), at `finishing` = 1 unless told;
  each mechanism's subclass says one participation's RDP (`_shares_rdp`).
  `members_only`: the shares come from a group's members only (see the
  module docstring), and `finishing` is the share of them that finish.
  `finished`: each round's count of devices that sent their update and
  share (`given`); None: all of them.
  """

  # The ledger's word on this epsilon: RDP converted (not the exact curve).
  bound = 'rdp'

  noise_multiplier: float = 0.0
  sensitivity: float = 0.0
  local_stddev: float = 0.0
  dim: int = 0
  members_only: bool = False
  finished: tuple[int, ...] | None = None

  def __post_init__(self):
    super().__post_init__()
    if self.finished is not None and not all(
        0 <= c <= self.clients_per_round for c in self.finished):
      raise ValueError('each round\'s finished devices must be in [0, '
                       f'{self.clients_per_round}], got {self.finished}.')
    if not isinstance(self.noise, min_separation.IndependentNoise):
      raise ValueError('distributed noise is fresh every round '
                       '(IndependentNoise).')
    if not (self.sensitivity > 0 and self.noise_multiplier > 0 and
            self.local_stddev > 0 and self.dim >= 1):
      raise ValueError('sensitivity, noise multiplier and local std must be '
                       f'> 0 and dim >= 1, got {self.sensitivity}, '
                       f'{self.noise_multiplier}, {self.local_stddev}, '
                       f'{self.dim}.')

  @abc.abstractmethod
  def _shares_rdp(self, shares: float, tau_shares: int) -> np.ndarray:
    """One participation's RDP at `ORDERS` when the sum's variance is
    `shares` local variances, bounding a sum of up to `tau_shares`
    shares."""

  def at(self, noise_multiplier: float) -> DistributedShares:
    """The same build at another noise multiplier, its local std scaled
    with it (planning only: TFF's scale and inflation move a little with
    the noise, so a factory is accounted from its own build)."""
    return dataclasses.replace(
        self, noise_multiplier=noise_multiplier,
        local_stddev=self.local_stddev * noise_multiplier /
        self.noise_multiplier)

  def given(self, finished: Sequence[int]) -> DistributedShares:
    """These shares in rounds that `finished[t]` of round t's devices
    sent (devices dropped before the round's count was announced, in the
    one-slot variant: its members' shares are scaled to the members that
    send, so the sums' noise is whole)."""
    return dataclasses.replace(self, finished=tuple(int(c) for c in finished))

  def round_rdp(self, finishing: float = 1.0) -> np.ndarray:
    """One participation's RDP at `ORDERS` when a `finishing` share of the
    round's devices (of a group's members, `members_only`) add their
    noise share."""
    if not 0 < finishing <= 1:
      raise ValueError(f'finishing share must be in (0, 1], got {finishing}.')
    n = self.clients_per_round
    if self.members_only:
      return self._shares_rdp(finishing * n, n)
    shares = max(1, math.floor(finishing * n + 1e-9))
    return self._shares_rdp(shares, shares)

  def epsilon_spent(self, noise_multiplier: float,
                    clip_count_stddev: float | None, rounds: int,
                    delta: float, finishing: float = 1.0) -> float:
    """A device's epsilon at `delta` for the first `rounds` rounds (the
    ledger's call: `noise_multiplier` must be the build's; the clip is
    fixed, so no clip count is released)."""
    if clip_count_stddev is not None:
      raise ValueError('distributed noise runs at a fixed clip norm: no clip '
                       'count is accounted.')
    if not math.isclose(noise_multiplier, self.noise_multiplier,
                        rel_tol=1e-9):
      raise ValueError(f'noise multiplier {noise_multiplier} is not the '
                       f"build's {self.noise_multiplier}.")
    if rounds < 1:
      return 0.0
    participations = self.model(rounds).reachable_participations
    if self.finished is None or self.members_only:
      total = participations * self.round_rdp(finishing)
    elif finishing != 1.0:
      raise ValueError('rounds with their finished devices are accounted at '
                       'those counts, not at a finishing share.')
    else:
      total = self._worst_rounds_rdp(self.model(rounds))
    return rdp.rdp_privacy_accountant.compute_epsilon(ORDERS, total, delta)[0]

  def _worst_rounds_rdp(self, model: min_separation.MinSeparation
                        ) -> np.ndarray:
    """At each order, the largest sum of the rounds' RDP (at their
    finished counts) over the rounds one device may take part in under
    `model`: at most its reachable participations, `min_separation`
    apart."""
    if len(self.finished) < model.rounds:
      raise ValueError(f'{len(self.finished)} rounds\' finished devices '
                       f'known, {model.rounds} accounted.')
    return self._worst_prefix_rdp[model.rounds]

  @functools.cached_property
  def _worst_prefix_rdp(self) -> np.ndarray:
    """Row t: `_worst_rounds_rdp` over the first t rounds, for every t,
    from one dynamic program over the rounds (a run asks after each)."""
    n = self.clients_per_round
    at = {c: self.round_rdp(c / n) if c else np.zeros(len(ORDERS))
          for c in set(self.finished)}
    # best[t][j]: the largest sum over at most j of the first t rounds.
    none = np.zeros((self.max_participations + 1, len(ORDERS)))
    best, rows = [none], [none[0]]
    for t, c in enumerate(self.finished):
      before = best[max(0, t - self.min_separation + 1)]
      take = np.vstack([none[:1], before[:-1] + at[c]])
      best.append(np.maximum(best[t], take))
      rows.append(best[-1][self.model(t + 1).reachable_participations])
    return np.stack(rows)

  def calibrate(self, target_epsilon: float, delta: float, rounds: int,
                clip_count_stddev: float | None = None) -> float:
    """The least noise multiplier (local std scaled with it, `at`) whose
    epsilon after `rounds` is at most `target_epsilon`."""
    def over(z):
      return self.at(z).epsilon_spent(z, clip_count_stddev, rounds,
                                      delta) - target_epsilon
    high = self.noise_multiplier
    while over(high) > 0:
      high *= 2.0
    low = high / 2.0
    while over(low) <= 0:
      low /= 2.0
    z = optimize.brentq(over, low, high, xtol=1e-12, rtol=1e-12)
    while over(z) > 0:
      z *= 1 + 1e-9
    return z


@dataclasses.dataclass(frozen=True)
class DistributedDiscreteGaussian(DistributedShares):
  """Discrete Gaussian shares (Kairouz et al.'s bound, the L2 terms)."""

  def __post_init__(self):
    super().__post_init__()
    if not self.local_stddev >= 0.5:
      raise ValueError('Theorem 1 holds for shares of std >= 1/2 (integer '
                       f'domain), got {self.local_stddev}.')

  def _shares_rdp(self, shares: float, tau_shares: int) -> np.ndarray:
    scale = self.sensitivity / (math.sqrt(shares) * self.local_stddev)
    return sum_rdp(ORDERS, scale, sum_tau(self.local_stddev, tau_shares),
                   self.dim)


@dataclasses.dataclass(frozen=True)
class DistributedSkellam(DistributedShares):
  """Skellam shares (Agarwal et al.'s bound), `l1_sensitivity` TFF's L1
  bound in the integer domain."""

  l1_sensitivity: float = 0.0

  def __post_init__(self):
    super().__post_init__()
    if not self.l1_sensitivity > 0:
      raise ValueError('Skellam\'s bound needs the L1 sensitivity (> 0), got '
                       f'{self.l1_sensitivity}.')

  def _shares_rdp(self, shares: float, tau_shares: int) -> np.ndarray:
    del tau_shares  # a sum of Skellams is a Skellam
    return skellam_rdp(ORDERS, self.sensitivity, self.l1_sensitivity,
                       shares * self.local_stddev**2)

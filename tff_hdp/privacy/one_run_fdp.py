"""A certified one-run lower bound on epsilon from a claimed f-DP curve.

Mahloujifar, Melis & Chaudhuri (ICML 2025), "Auditing f-differential
privacy in one run". The audit's game: each of m canaries is inserted by
its own fair coin S_j, kept secret; after the run an auditor that sees the
scores (never the coins) guesses "inserted" for some canaries, "not
inserted" for others and abstains on the rest, k guesses in all, and
counts the c correct ones.

The bound. If the mechanism is f-DP in each canary (f symmetric), then for
the count C of correct guesses, with r_i = E[C; C >= i] / m and
h_i = E[k - C; C >= i] / m, every i < k has

    r_{i+1} <= 1 - f(h_i)

(the event "guess j is right and at least i others are" is a test between
S_j = 1 and S_j = 0 given the other coins; average over j by the convexity
of f). If P(C >= c) >= alpha, walking these constraints down from
r_c = alpha c / m, h_c = alpha (k - c) / m forces r_0 + h_0 above k / m,
their sum for every law of C: the count rejects "f-DP" at level alpha
(`rejects`, the paper's Algorithm 3 with its cap).

Scanned over a one-parameter family of curves (mu-GDP's, or the claimed
subsampled Gaussian's by its noise multiplier), the weakest claim the
count rejects is certified at 1 - alpha; its epsilon at the group's delta
is the certified lower bound. It holds for any mechanism that the family
member describes and for any score computed without the coins; several
guess counts k split alpha (Bonferroni).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from scipy import special

# f-bar^{-1}(r) = f(1 - r) for a symmetric trade-off f: the least type-I
# error a test of power r can have.
InverseBlowUp = Callable[[float], float]


def gaussian_inverse_blow_up(mu: float) -> InverseBlowUp:
  """mu-GDP's: Phi(Phi^-1(r) - mu)."""
  return lambda r: float(special.ndtr(special.ndtri(r) - mu))


def profile_inverse_blow_up(epsilons, deltas) -> InverseBlowUp:
  """The symmetric curve a privacy profile (delta(eps) on a grid, both
  adjacency directions' worst) allows: f(a) = max_eps max(0,
  1 - delta - e^eps a, e^-eps (1 - delta - a)), so f(1 - r) =
  max(0, max_eps max(1 - delta - e^eps (1 - r), e^-eps (r - delta))).
  A finite grid gives a weaker curve than the profile's own, so what
  rejects it rejects the profile."""
  eps = np.asarray(epsilons, np.float64)
  one_minus_delta = 1.0 - np.asarray(deltas, np.float64)
  up, down = np.exp(eps), np.exp(-eps)

  def inverse(r: float) -> float:
    return float(max(0.0, np.max(one_minus_delta - up * (1.0 - r)),
                     np.max(down * (r - 1.0 + one_minus_delta))))
  return inverse


def subsampled_gaussian_pld(noise_multiplier: float, sampling_rate: float,
                            steps: int, discretization: float = 1e-3):
  """dp_accounting's (pessimistic) privacy loss distribution of `steps`
  Poisson-subsampled Gaussian steps (add or remove one)."""
  from tff_hdp.privacy import subsampled_gaussian_pld  # pylint: disable=g-import-not-at-top
  pld = subsampled_gaussian_pld.from_gaussian_mechanism(
      noise_multiplier, sampling_rate, discretization)
  return pld.self_compose(steps) if steps > 1 else pld


def subsampled_gaussian_inverse_blow_up(noise_multiplier: float,
                                        sampling_rate: float, steps: int,
                                        grid: int = 2000) -> InverseBlowUp:
  """The claimed mechanism's curve from its PLD's profile on `grid`
  epsilons, up to where delta(eps) falls to 1e-12 (or the PLD's own
  truncation mass, whichever is larger)."""
  pld = subsampled_gaussian_pld(noise_multiplier, sampling_rate, steps)
  top = next(e for e in (pld.get_epsilon_for_delta(d)
                         for d in (1e-12, 1e-9, 1e-6)) if math.isfinite(e))
  eps = np.linspace(0.0, max(top, 1e-3), grid)
  return profile_inverse_blow_up(eps, pld.get_delta_for_epsilon(eps))


def rejects(inverse_blow_up: InverseBlowUp, canaries: int, guesses: int,
            correct: int, alpha: float) -> bool:
  """Whether `correct` right guesses of `guesses` about `canaries` fair
  coins have probability below `alpha` under every mechanism that is f-DP
  in each coin (f given by its `inverse_blow_up`).

  From i = correct - 1 down: h_i must reach f-bar^{-1}(r_{i+1}); the
  outcomes C = i that supply it bring i correct guesses per k - i wrong
  ones, so r_i = r_{i+1} + i / (k - i) (h_i - h_{i+1}) (capped at 1).
  Once h stops moving nothing below moves. A sum past k / m by rounding
  alone does not reject.
  """
  if not 0 <= correct <= guesses <= canaries or guesses == 0:
    raise ValueError('need 0 <= correct <= guesses <= canaries and '
                     'guesses > 0.')
  r = alpha * correct / canaries
  h = alpha * (guesses - correct) / canaries
  for i in range(correct - 1, -1, -1):
    h_new = max(h, inverse_blow_up(r))
    if h_new == h:
      break
    r = min(1.0, r + i / (guesses - i) * (h_new - h))
    h = h_new
  return r + h > guesses / canaries * (1 + 1e-12)


def guess_counts(scores, coins, guesses: Sequence[int]
                 ) -> list[tuple[int, int]]:
  """(k, correct) for every k of `guesses`: the k/2 highest scores guessed
  inserted and the k - k/2 lowest not (the guesses read the scores only;
  `coins`, 1 = inserted, only count them)."""
  scores = np.asarray(scores, np.float64)
  coins = np.asarray(coins, bool)
  if scores.shape != coins.shape or scores.ndim != 1:
    raise ValueError('need one coin per score.')
  order = np.argsort(scores, kind='stable')
  top = np.concatenate([[0], np.cumsum(coins[order[::-1]])])
  bottom = np.concatenate([[0], np.cumsum(~coins[order])])
  out = []
  for k in guesses:
    if not 0 < k <= len(scores):
      raise ValueError(f'cannot make {k} guesses about {len(scores)} '
                       f'canaries.')
    out.append((k, int(top[k // 2] + bottom[k - k // 2])))
  return out


def default_guesses(canaries: int) -> list[int]:
  """k = m, m/2, m/4, ... down to 8: the bound's reach grows with k, the
  guesses' precision with smaller k; log2(m) of them keep the Bonferroni
  price small."""
  out, k = [], canaries
  while k >= 8:
    out.append(k)
    k //= 2
  return out or [canaries]


def certified_parameter(family: Callable[[float], InverseBlowUp],
                        claims: Sequence[float], canaries: int, guesses: int,
                        correct: int, alpha: float) -> float | None:
  """The weakest of `claims` (parameters of `family`, ordered from the
  most private claim to the least) that the count rejects at `alpha`
  (rejection is monotone along them: a binary search); None when not even
  the first is rejected."""
  def rejected(i):
    return rejects(family(claims[i]), canaries, guesses, correct, alpha)
  if not rejected(0):
    return None
  a, b = 0, len(claims)  # rejected at a, not at b (b past the end: unknown)
  while b - a > 1:
    mid = (a + b) // 2
    a, b = (mid, b) if rejected(mid) else (a, mid)
  return claims[a]


def certified(scores, coins, confidence: float,
              family: Callable[[float], InverseBlowUp],
              claims: Sequence[float], guesses: Sequence[int] | None = None
              ) -> float | None:
  """The weakest of `claims` (see `certified_parameter`) that the scores'
  guesses reject at `confidence`, over `guesses` (default
  `default_guesses`) with 1 - confidence split over them; None: none
  rejected."""
  m = len(scores)
  guesses = default_guesses(m) if guesses is None else list(guesses)
  alpha = (1 - confidence) / len(guesses)
  index = {c: i for i, c in enumerate(claims)}
  found = [certified_parameter(family, claims, m, k, c, alpha)
           for k, c in guess_counts(scores, coins, guesses) if 2 * c > k]
  found = [t for t in found if t is not None]
  return max(found, key=index.get) if found else None

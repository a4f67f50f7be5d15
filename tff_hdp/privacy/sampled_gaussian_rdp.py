"""The Poisson-subsampled Gaussian's RDP at one order, summed with numpy: the
objective of the noise and rate searches, never a printed epsilon.

dp_accounting computes log A_alpha (Mironov, Talwar & Zhang 2019, Sec. 3.3)
term by term in a Python loop: a fractional order takes up to hundreds of
terms (~1-3 ms), and a calibration evaluates tens to thousands of orders.
This sums the same terms, up to the same stopping term, in a few array
operations. `accounting` steers its searches with it and checks every noise
multiplier, rate and order they return with dp_accounting's own accountant,
so the epsilon a run prints and the target it meets are dp_accounting's
(tests/privacy/test_sampled_gaussian_rdp.py compares the two on the grid of
rates, multipliers and orders the searches visit).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

# dp_accounting's fractional series stops after the first term whose two
# parts are both below e^-30.
_LAST_TERM = -30.0


def _log_erfc(x: np.ndarray) -> np.ndarray:
  return math.log(2) + special.log_ndtr(-x * 2**.5)


def _signed_log_sum(log_terms: np.ndarray, signs: np.ndarray) -> float:
  """log(sum signs * e^log_terms); NaN where the sum is not positive (the
  series has cancelled beyond float precision: no value to steer by)."""
  top = log_terms.max()
  if top == -math.inf:
    return -math.inf
  total = float(np.dot(signs, np.exp(log_terms - top)))
  return math.log(total) + top if total > 0 else math.nan


def _log_a_int(q: float, sigma: float, alpha: int) -> float:
  i = np.arange(alpha + 1, dtype=float)
  log_comb = (special.gammaln(alpha + 1) - special.gammaln(i + 1) -
              special.gammaln(alpha - i + 1))
  terms = (log_comb + i * math.log(q) + (alpha - i) * math.log1p(-q) +
           (i * i - i) / (2 * sigma**2))
  return _signed_log_sum(terms, np.ones_like(terms))


def _fractional_terms(q: float, sigma: float, alpha: float, count: int):
  i = np.arange(count, dtype=float)
  coef = special.binom(alpha, i)
  log_coef = np.log(np.abs(coef))
  j = alpha - i
  z0 = sigma**2 * math.log(1 / q - 1) + .5
  log_s0 = (log_coef + i * math.log(q) + j * math.log(1 - q) +
            (i * i - i) / (2 * sigma**2) + math.log(.5) +
            _log_erfc((i - z0) / (math.sqrt(2) * sigma)))
  log_s1 = (log_coef + j * math.log(q) + i * math.log(1 - q) +
            (j * j - j) / (2 * sigma**2) + math.log(.5) +
            _log_erfc((z0 - j) / (math.sqrt(2) * sigma)))
  return np.sign(coef), log_s0, log_s1


def _log_a_frac(q: float, sigma: float, alpha: float) -> float:
  count = 16
  while True:
    signs, log_s0, log_s1 = _fractional_terms(q, sigma, alpha, count)
    small = np.flatnonzero(np.maximum(log_s0, log_s1) < _LAST_TERM)
    if small.size:
      end = small[0] + 1
      break
    count *= 8
  return float(np.logaddexp(_signed_log_sum(log_s0[:end], signs[:end]),
                            _signed_log_sum(log_s1[:end], signs[:end])))


def rdp(q: float, noise_multiplier: float, order: float) -> float:
  """RDP at `order` of one round: rate-`q` Poisson sampling, Gaussian noise
  of `noise_multiplier` times the sensitivity (add/remove one). NaN where
  the series loses all precision; the caller then asks dp_accounting."""
  if q == 0:
    return 0.0
  if math.isinf(order) or noise_multiplier == 0:
    return math.inf
  if q == 1:
    return order / (2 * noise_multiplier**2)
  if float(order).is_integer():
    log_a = _log_a_int(q, noise_multiplier, int(order))
  else:
    log_a = _log_a_frac(q, noise_multiplier, order)
  return log_a / (order - 1)

"""Empirical epsilon from canary clients (one-shot estimation).

Canary clients send a fixed random unit direction (scaled past the clip) and
are sampled like real clients; at the end each canary is scored by the cosine
of the released model delta with its direction (with all iterates released:
its largest cosine over the rounds). Scores of inserted canaries against
scores of canaries never inserted (or the closed-form null of a random
direction) give two numbers a user can see next to the accounted epsilon:

* an estimate: the epsilon of mu-GDP with mu the shift of the inserted
  scores' mean from the unseen ones' in units of their pooled standard
  deviation (`gdp_estimate`), the Gaussian mechanism's own shape. It is no
  bound. The reference (Andrew et al., ICLR 2024) fits each set its own
  Gaussian (`estimate_from_scores`, also reported); at small delta that
  value swings with the ratio of the two sample deviations: at delta 1e-5,
  mu 0.86, a ratio of 1.02 (what 1,000 canaries a side give by chance) turns
  the exact 3.70 into 4.08, and 0.95 into 4.97.
* a lower bound at a stated confidence: thresholding the scores is a
  membership test, and every test bounds TPR <= e^eps FPR + delta (Jagielski
  et al. 2020). An accounted epsilon below it is a privacy bug. With K
  canaries a side it can never exceed `lower_bound_capacity` (about 6 at
  K = 1,000 and delta 1e-5: even perfectly separated scores certify no
  more), so it cannot flag a printed epsilon above that.
* an alarm that can fire at any epsilon: the estimate's own lower
  confidence limit (`estimate_lower_limit`: mu's one-sided limit from the
  sampling distribution of the standardized mean difference, as mu-GDP's
  epsilon). A Gaussian-shaped audit of a mechanism that meets the printed
  epsilon has mu at most that epsilon's mu, so the limit exceeds the
  printed epsilon in at most 1 - confidence of correct runs (measured by
  Monte Carlo at that boundary in the tests); a run splits its
  1 - confidence over the groups or clients it audits (Bonferroni).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import optimize, special, stats



def clopper_pearson(successes: int, trials: int,
                    alpha: float) -> tuple[float, float]:
  """Two-sided (1 - alpha) exact binomial confidence interval."""
  lo = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes,
                                                 trials - successes + 1)
  hi = 1.0 if successes == trials else stats.beta.ppf(1 - alpha / 2,
                                                      successes + 1,
                                                      trials - successes)
  return float(lo), float(hi)


def cosine_null(dim: int):
  """The exact law of the cosine of a uniform random direction in `dim` dims
  with any fixed vector: (t + 1) / 2 ~ Beta((d-1)/2, (d-1)/2), so mean 0 and
  variance exactly 1/d (the squared coordinates of a unit vector sum to 1).
  """
  if dim < 2:
    raise ValueError(f'a cosine needs dim >= 2, got {dim}.')
  half = (dim - 1) / 2
  return stats.beta(half, half, loc=-1.0, scale=2.0)


def _log_mass(intervals, mu: float, sigma: float) -> float:
  """log P(Y in the union of disjoint intervals), Y ~ N(mu, sigma^2), taking
  each interval's mass from the tail it lies in so tiny masses keep digits.
  log Phi is scipy.special's log_ndtr, what scipy.stats.norm.logcdf and
  logsf compute after per-call argument checks that cost 300 times more."""
  logs = []
  for lo, hi in intervals:
    if lo >= mu:  # upper tail: sf(lo) - sf(hi)
      a, b = (special.log_ndtr(-((lo - mu) / sigma)),
              special.log_ndtr(-((hi - mu) / sigma)))
    else:
      a, b = (special.log_ndtr((hi - mu) / sigma),
              special.log_ndtr((lo - mu) / sigma))
    if b >= a:
      continue
    logs.append(a + math.log1p(-math.exp(b - a)))
  return float(special.logsumexp(logs)) if logs else -math.inf


def _log_hockey_stick(mu_p, sigma_p, mu_q, sigma_q, eps: float) -> float:
  """log of delta(eps) = P(L > eps) - e^eps Q(L > eps), L = log dP/dQ.

  L is quadratic in y, so {L > eps} is a half-line, an interval or the
  complement of one: both masses are exact Gaussian tails.
  """
  a = 0.5 / sigma_q**2 - 0.5 / sigma_p**2
  b = mu_p / sigma_p**2 - mu_q / sigma_q**2
  c = (0.5 * (mu_q / sigma_q)**2 - 0.5 * (mu_p / sigma_p)**2 +
       math.log(sigma_q / sigma_p) - eps)  # region: a y^2 + b y + c > 0
  if a == 0.0:
    if b == 0.0:
      return -math.inf  # P == Q
    root = -c / b
    region = [(root, math.inf)] if b > 0 else [(-math.inf, root)]
  else:
    disc = b * b - 4 * a * c
    if disc <= 0:  # L - eps keeps the sign of a: region empty, or all of R
      return -math.inf
    q = -0.5 * (b + math.copysign(math.sqrt(disc), b))  # no cancellation
    lo, hi = sorted((q / a, c / q))
    region = ([(-math.inf, lo), (hi, math.inf)] if a > 0 else [(lo, hi)])
  log_p = _log_mass(region, mu_p, sigma_p)
  log_q = _log_mass(region, mu_q, sigma_q)
  if log_p == -math.inf or eps + log_q >= log_p:
    return -math.inf
  return log_p + math.log1p(-math.exp(eps + log_q - log_p))


def gaussian_epsilon(mu_in: float, sigma_in: float, mu_out: float,
                     sigma_out: float, delta: float) -> float:
  """The exact epsilon at `delta` of N(mu_in, sigma_in^2) vs
  N(mu_out, sigma_out^2), both orders (equal sigmas: mu-GDP with
  mu = |mu_in - mu_out| / sigma)."""
  if sigma_in <= 0 or sigma_out <= 0 or not 0 < delta < 1:
    raise ValueError('need positive sigmas and 0 < delta < 1.')
  pair = (mu_in, sigma_in, mu_out, sigma_out)
  swapped = (mu_out, sigma_out, mu_in, sigma_in)
  log_delta = math.log(delta)

  def excess(eps):
    """Nonincreasing in eps (a hockey-stick divergence); floored where the
    divergence vanishes (log 0) since brentq needs finite values."""
    return max(_log_hockey_stick(*pair, eps),
               _log_hockey_stick(*swapped, eps), -1e4) - log_delta

  if excess(0.0) <= 0:
    return 0.0
  hi = 1.0
  while excess(hi) > 0:
    hi *= 2
  return float(optimize.brentq(excess, hi / 2 if hi > 1 else 0.0, hi,
                               xtol=1e-12, rtol=1e-14))


def estimate_from_scores(inserted, unseen, dim: int, delta: float) -> float:
  """One-shot estimate: `gaussian_epsilon` of Gaussians fitted to the inserted
  canaries' scores and to the unseen ones' (None: the null N(0, 1/dim),
  exact in mean and variance, valid only for final-model cosines)."""
  (m_in, v_in), (m_out, v_out) = _mean_and_variance(inserted, unseen, dim)
  return gaussian_epsilon(m_in, math.sqrt(v_in), m_out, math.sqrt(v_out),
                          delta)


def _mean_and_variance(inserted, unseen, dim: int):
  """Means and variances of the inserted and the unseen scores (None: the
  closed-form null, mean 0 and variance 1/dim)."""
  inserted = np.asarray(inserted, np.float64)
  if unseen is None:
    out = (0.0, 1.0 / dim)
  else:
    unseen = np.asarray(unseen, np.float64)
    out = (float(unseen.mean()), float(unseen.var(ddof=1)))
  return (float(inserted.mean()), float(inserted.var(ddof=1))), out


def gdp_estimate(inserted, unseen, dim: int, delta: float) -> float:
  """The estimate a run reports: mu-GDP's epsilon at `delta` for mu = |mean
  inserted - mean unseen| / pooled sd (unseen None: the closed-form null)."""
  (m_in, v_in), (m_out, v_out) = _mean_and_variance(inserted, unseen, dim)
  pooled = math.sqrt((v_in + v_out) / 2)
  return gaussian_epsilon(abs(m_in - m_out) / pooled, 1.0, 0.0, 1.0, delta)


def expected_example_mu(sampling_rate: float, steps: int,
                        noise_multiplier: float) -> float:
  """The mu `gdp_estimate` reads, in expectation, from canary examples'
  scores summed over `steps` DP-SGD steps (`dp_sgd.canary_scores`).

  Per step an inserted canary adds Bernoulli(q) c v / B and the noise adds
  N(0, (z c / B)^2) along v, so the inserted scores have mean q T and
  variance T (q (1 - q) + z^2), the unseen ones mean 0 and variance T z^2
  (units of c / B, T steps): mu = q sqrt(T) / sqrt(z^2 + q (1 - q) / 2)
  with the pooled sd. Exact at q = 1 (the Gaussian mechanism's sqrt(T) /
  z); at small q it reads the subsampled mechanism by its mean and
  variance only, below what the accountant bounds. Ignores the data's
  gradients and the other canaries along v (zero mean, small variance in
  a large model).
  """
  q, z = sampling_rate, noise_multiplier
  return q * math.sqrt(steps) / math.sqrt(z * z + q * (1 - q) / 2)


def _upper(k, n: int, alpha: float, interval: str):
  """One-sided (1 - alpha) upper bounds on binomial rates, k successes of n.

  Jeffreys (the reference's choice) is tighter but its coverage is only
  approximate; Clopper-Pearson's is guaranteed.
  """
  k = np.asarray(k)
  if interval == 'jeffreys':
    return np.where(k == n, 1.0, stats.beta.ppf(1 - alpha, k + 0.5,
                                                n - k + 0.5))
  if interval == 'clopper_pearson':
    return np.array([clopper_pearson(int(j), n, 2 * alpha)[1]
                     for j in k.ravel()]).reshape(k.shape)
  raise ValueError(f'unknown interval {interval!r}.')


def lower_limit_mu(inserted, unseen, dim: int, confidence: float) -> float:
  """A one-sided `confidence` lower limit on the mu that `gdp_estimate`
  reads.

  The standardized mean difference d of n1 inserted and n2 unseen scores
  has variance 1/n1 + 1/n2 + d^2 / (2 (n1 + n2)) for Gaussian scores
  (Hedges & Olkin 1985, eq. 5.15; n2 infinite with the closed-form null);
  the limit is d - z_confidence times its root, at least 0.
  """
  (m_in, v_in), (m_out, v_out) = _mean_and_variance(inserted, unseen, dim)
  d = abs(m_in - m_out) / math.sqrt((v_in + v_out) / 2)
  n1 = len(inserted)
  n2 = math.inf if unseen is None else len(unseen)
  variance = 1 / n1 + 1 / n2 + d * d / (2 * (n1 + n2))
  return max(0.0, d - stats.norm.ppf(confidence) * math.sqrt(variance))


def estimate_lower_limit(inserted, unseen, dim: int, delta: float,
                         confidence: float) -> float:
  """mu-GDP's epsilon at `delta` of `lower_limit_mu`."""
  mu = lower_limit_mu(inserted, unseen, dim, confidence)
  return gaussian_epsilon(mu, 1.0, 0.0, 1.0, delta) if mu > 0 else 0.0


def lower_bound_capacity(inserted: int, unseen: int, delta: float,
                         confidence: float,
                         interval: str = 'jeffreys') -> float:
  """The largest `lower_bound` that `inserted` and `unseen` canaries can
  certify: that of perfectly separated scores at one threshold (more
  thresholds only split alpha further)."""
  return lower_bound(np.ones(inserted), np.zeros(unseen), delta, confidence,
                     interval=interval)


def threshold_grid(inserted) -> np.ndarray:
  """The scanned thresholds: inserted scores whose rank from the top or from
  the bottom is a power of two. The best test sits in a tail, where counts
  change geometrically; log2(n) thresholds per tail keep the Bonferroni
  price of scanning small (all n scores, as the reference scans, would cost
  a factor n in alpha). At the r-th smallest score the FNR is exactly
  Beta(r, n - r + 1), the Clopper-Pearson law, so data-chosen thresholds
  keep the intervals valid."""
  s = np.sort(np.asarray(inserted, np.float64))
  ranks = 2**np.arange(int(math.log2(len(s))) + 1)
  return np.unique(np.concatenate([s[len(s) - ranks], s[ranks - 1]]))


def lower_bound(inserted, unseen, delta: float, confidence: float, *,
                dim: int | None = None, interval: str = 'jeffreys') -> float:
  """The largest epsilon certified at `confidence` by thresholding scores.

  At threshold t, "score >= t" is a membership test; with upper bounds on its
  FNR (inserted below t) and FPR (unseen at or above t), (eps, delta)-DP
  implies eps >= log((1 - delta - FNR) / FPR) and
  eps >= log((1 - delta - FPR) / FNR). With `unseen` None the FPR is exact
  from `cosine_null(dim)`. The reference (Jagielski et al., Andrew et al.)
  scans every score at the full alpha, which overstates the confidence of
  the maximum; here alpha = 1 - confidence is split (Bonferroni) over every
  interval of every threshold in `threshold_grid`, so the maximum holds at
  the stated confidence.
  """
  inserted = np.asarray(inserted, np.float64)
  n = len(inserted)
  if n == 0 or (unseen is None) == (dim is None):
    raise ValueError('need inserted scores and exactly one of unseen, dim.')
  thresholds = threshold_grid(inserted)
  fn = np.sum(inserted[None, :] < thresholds[:, None], axis=1)
  if unseen is None:
    alpha = (1 - confidence) / len(thresholds)
    log_fpr = cosine_null(dim).logsf(thresholds)  # -inf past float range
  else:
    unseen = np.asarray(unseen, np.float64)
    if len(unseen) == 0:
      raise ValueError('unseen scores are empty; pass None and dim instead.')
    alpha = (1 - confidence) / (2 * len(thresholds))
    fp = np.sum(unseen[None, :] >= thresholds[:, None], axis=1)
    log_fpr = np.log(_upper(fp, len(unseen), alpha, interval))
  fnr = _upper(fn, n, alpha, interval)
  with np.errstate(divide='ignore', invalid='ignore'):
    bounds = np.concatenate([np.log(1 - delta - fnr) - log_fpr,
                             np.log1p(-delta - np.exp(log_fpr)) - np.log(fnr)])
  # Dropping infinite bounds (FPR underflowed to 0) only loosens the bound.
  bounds = bounds[np.isfinite(bounds)]
  return float(max(0.0, bounds.max())) if len(bounds) else 0.0


@dataclasses.dataclass(frozen=True)
class EmpiricalEpsilon:
  """What a run reports next to its accounted epsilon (summary.json)."""
  estimate: float  # `gdp_estimate`
  estimate_two_gaussians: float  # `estimate_from_scores`, the reference's
  lower_bound: float
  confidence: float
  delta: float
  inserted: int
  unseen: int   # 0: the closed-form null was used
  dim: int
  # The most `lower_bound` can certify with these counts (None: the
  # closed-form null, which has no such cap).
  lower_bound_capacity: float | None
  estimate_lower_limit: float  # `estimate_lower_limit`, at:
  alarm_confidence: float


def empirical_epsilon(inserted, unseen, dim: int, delta: float,
                      confidence: float = 0.95,
                      audits: int = 1) -> EmpiricalEpsilon:
  """Estimate, lower bound and the estimate's lower limit of one set of
  canary scores, one of `audits` a run makes (the limit's 1 - confidence is
  split over them)."""
  bound = lower_bound(inserted, unseen, delta, confidence,
                      dim=dim if unseen is None else None)
  alarm_confidence = 1 - (1 - confidence) / audits
  return EmpiricalEpsilon(
      estimate=gdp_estimate(inserted, unseen, dim, delta),
      estimate_two_gaussians=estimate_from_scores(inserted, unseen, dim,
                                                  delta),
      lower_bound=bound, confidence=confidence, delta=delta,
      inserted=len(inserted), unseen=0 if unseen is None else len(unseen),
      dim=dim,
      lower_bound_capacity=None if unseen is None else lower_bound_capacity(
          len(inserted), len(unseen), delta, confidence),
      estimate_lower_limit=estimate_lower_limit(inserted, unseen, dim, delta,
                                                alarm_confidence),
      alarm_confidence=alarm_confidence)


def alarm(audit: dict, printed_epsilon: float) -> bool:
  """Whether an audit (`EmpiricalEpsilon` as a dict) refutes the printed
  epsilon: its estimate's lower limit lies above it."""
  return bool(audit['estimate_lower_limit'] > printed_epsilon)

"""How far the f-DP one-run bound (`tff_hdp/privacy/one_run_fdp.py`) reaches
with K canaries, each inserted by its own secret fair coin.

1. Idealized: m canaries, canary j scores N(mu S_j, 1) independently, mu
   the mu-GDP parameter whose epsilon at delta is the printed one (1, 3.6,
   10); the bound scans mu-GDP's curves. Per level: the certified epsilon's
   median and 5% quantile over the repetitions, how often it exceeds the
   printed epsilon at the true mu (false alarms) and at 2 mu (the noise
   secretly halved: power); the most the bound can certify with m
   canaries (every guess right); and, as a reference that is no one-run
   certificate, the Gaussian-shape limit (the standardized mean
   difference's one-sided 95% limit, `empirical_epsilon.lower_limit_mu`,
   which treats the canaries as independent Gaussian trials).
2. The claimed mechanism of FeO2's MNIST thirds (q = 0.05, T = 500, delta
   1e-4, the PLD's z per level): canary j's round-t score is
   s_t = S_j B_t + z N_t (B_t ~ Bernoulli(q), units of the clip), scored
   by the likelihood ratio statistic sum_t log(1 - q + q e^{(s_t - 1/2) /
   z^2}), by the plain sum sum_t s_t (what the final model's cosine reads)
   and by max_t s_t (what the all-rounds cosine reads); the bound scans the
   subsampled Gaussian's curves (dp_accounting's PLD) over z.
3. The reach of the paper's bound itself: mu-GDP scores at their expected
   counts, the best number of guesses k chosen knowing the truth and no
   Bonferroni split, for m = 1,000, 2,000 and 10,000 canaries: what no
   choice of guesses can beat. Beside it, a cap on every certificate that
   reads only the count: a mechanism mu-GDP in each coin (one privacy-loss
   draw shared by all canaries, then randomized response at it) that
   makes that count as likely as alpha; the tight count-based certificate
   lies between the two.

  .venv/bin/python benchmarks/one_run_fdp.py [--reps=100]
      [--subsampled_reps=20] [--canaries=1000] [--noreach]
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time

from absl import flags
import numpy as np
from scipy import integrate, optimize, special, stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.cli import entry  # noqa: E402
from tff_hdp.privacy import empirical_epsilon  # noqa: E402
from tff_hdp.privacy import one_run_fdp  # noqa: E402

CONFIDENCE = 0.95
DELTA = 1e-4
LEVELS = (1.0, 3.6, 10.0)
_REPS = flags.DEFINE_integer('reps', 100,
                             'Repetitions of part 1 (0: skip it).')
_SUBSAMPLED_REPS = flags.DEFINE_integer(
    'subsampled_reps', 20, 'Repetitions of part 2 (0: skip it).')
_CANARIES = flags.DEFINE_integer('canaries', 1000,
                                 'Canaries m, each with its own coin.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the simulated runs.')
_REACH = flags.DEFINE_bool('reach', True, 'Part 3.')

MUS = np.round(np.arange(0.0, 8.0, 0.005), 3)  # mu-GDP claims, most private first


def gdp_epsilon(mu: float) -> float:
  return empirical_epsilon.gaussian_epsilon(mu, 1.0, 0.0, 1.0, DELTA) if (
      mu > 0) else 0.0


def gdp_mu(eps: float) -> float:
  return optimize.brentq(lambda m: gdp_epsilon(m) - eps, 1e-4, 20.0)


def summary(values, printed):
  v = np.asarray(values)
  return (f'median {np.median(v):6.2f}  5% quantile {np.quantile(v, 0.05):6.2f}'
          f'  above printed {np.mean(v > printed):5.1%}')


def idealized(reps: int, m: int, rng) -> None:
  print(f'1. idealized mu-GDP scores, m = {m} canaries with fair coins, '
        f'{reps} repetitions, delta {DELTA:g}, confidence {CONFIDENCE}')
  for eps in LEVELS:
    mu = gdp_mu(eps)
    ceiling = max(gdp_epsilon(one_run_fdp.certified_parameter(
        one_run_fdp.gaussian_inverse_blow_up, MUS, m, k, k,
        (1 - CONFIDENCE) / len(one_run_fdp.default_guesses(m))) or 0.0)
                  for k in one_run_fdp.default_guesses(m))
    for label, true_mu in (('true noise', mu), ('noise halved', 2 * mu)):
      bounds, limits = [], []
      for _ in range(reps):
        coins = rng.random(m) < 0.5
        scores = rng.normal(true_mu * coins, 1.0)
        found = one_run_fdp.certified(scores, coins, CONFIDENCE,
                                      one_run_fdp.gaussian_inverse_blow_up,
                                      MUS)
        bounds.append(gdp_epsilon(found or 0.0))
        limits.append(gdp_epsilon(empirical_epsilon.lower_limit_mu(
            scores[coins], scores[~coins], 2, CONFIDENCE)))
      print(f'  eps {eps:4g} (mu {mu:.3f}) {label:12s}: certified '
            f'{summary(bounds, eps)} | Gaussian-shape limit (no certificate) '
            f'median {np.median(limits):.2f}')
    print(f'  eps {eps:4g}: ceiling (every guess right) {ceiling:.2f}')


@functools.lru_cache(maxsize=None)
def _pld_curve(z: float, q: float, steps: int):
  return one_run_fdp.subsampled_gaussian_inverse_blow_up(z, q, steps)


def pld_z(eps: float, q: float, steps: int) -> float:
  return optimize.brentq(
      lambda z: one_run_fdp.subsampled_gaussian_pld(z, q, steps)
      .get_epsilon_for_delta(DELTA) - eps, 0.3, 20.0, xtol=1e-3)


def subsampled(reps: int, m: int, rng, q: float = 0.05,
               steps: int = 500) -> None:
  print(f'2. subsampled Gaussian, q {q}, T {steps}, m = {m} canaries with '
        f'fair coins, {reps} repetitions, delta {DELTA:g}')
  for eps in LEVELS:
    z = pld_z(eps, q, steps)
    # Claims from most private (large z) to least, 2% apart.
    claims = tuple(float(c) for c in z * np.exp(np.arange(1.5, -1.5, -0.02)))

    def epsilon(c):
      return (one_run_fdp.subsampled_gaussian_pld(c, q, steps)
              .get_epsilon_for_delta(DELTA) if c else 0.0)

    for label, true_z in (('true noise', z), ('noise halved', z / 2)):
      results = {'likelihood ratio': [], 'sum': [], 'max': []}
      for _ in range(reps):
        coins = rng.random(m) < 0.5
        present = coins[:, None] & (rng.random((m, steps)) < q)
        s = present + true_z * rng.standard_normal((m, steps))
        lr = np.sum(np.logaddexp(math.log1p(-q),
                                 math.log(q) + (s - 0.5) / z**2), axis=1)
        for name, score in (('likelihood ratio', lr), ('sum', s.sum(1)),
                            ('max', s.max(1))):
          found = one_run_fdp.certified(
              score, coins, CONFIDENCE,
              lambda c: _pld_curve(c, q, steps), claims)
          results[name].append(epsilon(found))
      for name, values in results.items():
        print(f'  eps {eps:4g} (z {z:.4f}) {label:12s} {name:16s}: '
              f'certified {summary(values, eps)}')


def _expected_correct(mu: float, m: int, k: int) -> int:
  """Expected right guesses among the k/2 highest and k/2 lowest of m
  scores, half N(mu, 1) (inserted) and half N(0, 1)."""
  def above(t):
    return 0.5 * stats.norm.sf(t - mu) + 0.5 * stats.norm.sf(t)
  high = optimize.brentq(lambda t: above(t) - k / 2 / m, -20, 30)
  low = optimize.brentq(lambda t: 1 - above(t) - k / 2 / m, -20, 30)
  return int(round(m * 0.5 * (stats.norm.sf(high - mu) +
                              stats.norm.cdf(low))))


def _shared_loss_tail(mu: float, k: int, c: int) -> float:
  """P(C >= c) of k guesses under a mechanism that is mu-GDP in every
  coin given the others: one draw L of mu-GDP's privacy loss magnitude
  (|N(mu^2/2, mu^2)|), shared by all canaries and released, then
  randomized response at L for each coin. C is Binomial(k, e^L / (1 +
  e^L)) given L."""
  def integrand(a):
    density = (stats.norm.pdf((a - mu * mu / 2) / mu) +
               stats.norm.pdf((a + mu * mu / 2) / mu)) / mu
    return density * stats.binom.sf(c - 1, k, special.expit(a))
  return integrate.quad(integrand, 0, mu * mu / 2 + 12 * mu, limit=200)[0]


def _shared_loss_cap(k: int, c: int, alpha: float) -> float:
  """The mu at which `_shared_loss_tail` reaches alpha: no valid
  certificate from the count (k, c) can certify more."""
  def excess(mu):
    return _shared_loss_tail(mu, k, c) - alpha
  if excess(1e-3) >= 0:
    return 0.0
  return MUS[-1] if excess(MUS[-1]) < 0 else optimize.brentq(
      excess, 1e-3, MUS[-1], xtol=1e-4)


def reach(sizes=(1000, 2000, 10000)) -> None:
  alpha = 1 - CONFIDENCE
  print(f'3. at expected counts, the best k, alpha {alpha:g} unsplit: the '
        'bound, and the cap on any count-based certificate (a mechanism '
        'mu-GDP in each coin that makes the count that likely)')
  for m in sizes:
    for eps in LEVELS:
      mu = gdp_mu(eps)
      bound, cap = (0.0, (0, 0)), (0.0, (0, 0))
      for k in np.unique(np.geomspace(8, m, 30).astype(int) // 2 * 2):
        k = int(k)
        c = _expected_correct(mu, m, k)
        if 2 * c > k:
          found = one_run_fdp.certified_parameter(
              one_run_fdp.gaussian_inverse_blow_up, MUS, m, k, c, alpha)
          bound = max(bound, (gdp_epsilon(found or 0.0), (k, c)))
          cap = max(cap, (gdp_epsilon(_shared_loss_cap(k, c, alpha)),
                          (k, c)))
      print(f'  m {m:6d} eps {eps:4g}: bound {bound[0]:.2f} (k {bound[1][0]}, '
            f'{bound[1][1]} right); cap {cap[0]:.2f} (k {cap[1][0]}, '
            f'{cap[1][1]} right)')


def main(argv):
  del argv
  rng = np.random.default_rng(_SEED.value)
  if _REPS.value:
    start = time.time()
    idealized(_REPS.value, _CANARIES.value, rng)
    print(f'  ({time.time() - start:.0f} s)')
  if _SUBSAMPLED_REPS.value:
    start = time.time()
    subsampled(_SUBSAMPLED_REPS.value, _CANARIES.value, rng)
    print(f'  ({time.time() - start:.0f} s)')
  if _REACH.value:
    reach()


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

"""The f-DP one-run bound against independent computations: trade-off
curves against integrals and closed forms (mu-GDP, one subsampled Gaussian
step, dp_accounting at a finer discretization), the bound's validity
against randomized response's exact binomial count and Monte Carlo runs of
a Gaussian mechanism, and the guesses against brute force."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from tff_hdp.privacy import one_run_fdp


@pytest.mark.parametrize('mu', [0.5, 2.0])
def test_gaussian_curve_is_the_neyman_pearson_test(mu):
  # Threshold test "score > t" between N(0, 1) and N(mu, 1), by quadrature.
  for t in (-1.0, 0.3, 2.5):
    alpha = integrate.quad(stats.norm.pdf, t, np.inf)[0]
    power = integrate.quad(lambda y: stats.norm.pdf(y - mu), t, np.inf)[0]
    assert one_run_fdp.gaussian_inverse_blow_up(mu)(power) == pytest.approx(
        alpha, rel=1e-6)


def test_pld_curve_of_unsampled_gaussian_is_mu_gdp():
  # T steps at noise z, everyone in each: sqrt(T) / z-GDP exactly. The
  # pessimistic PLD on a grid of epsilons claims a little less privacy.
  z, steps = 2.0, 9
  mu = math.sqrt(steps) / z
  pld = one_run_fdp.subsampled_gaussian_inverse_blow_up(z, 1.0, steps)
  gdp = one_run_fdp.gaussian_inverse_blow_up(mu)
  for r in (0.05, 0.3, 0.6, 0.9, 0.99):
    assert -1e-9 <= gdp(r) - pld(r) <= 0.01 * max(gdp(r), 1e-3) + 1e-4


def _one_step_inverse(z, q, r):
  """f-bar^{-1}(r) of one Poisson-subsampled Gaussian step, both orders
  (remove: (1-q) N(0, z^2) + q N(1, z^2) vs N(0, z^2); add: swapped):
  the Neyman-Pearson tests are thresholds on y, from normal tails."""
  mix_sf = lambda t: (1 - q) * stats.norm.sf(t / z) + q * stats.norm.sf(
      (t - 1) / z)
  mix_cdf = lambda t: 1 - mix_sf(t)
  # remove: reject for large y; power under the mixture, size under N(0).
  t1 = optimize.brentq(lambda t: mix_sf(t) - r, -50, 50)
  remove = stats.norm.sf(t1 / z)
  # add: reject for small y; power under N(0), size under the mixture.
  t2 = optimize.brentq(lambda t: stats.norm.cdf(t / z) - r, -50, 50)
  add = mix_cdf(t2)
  return min(remove, add)


def test_subsampled_curve_against_one_step_closed_form():
  z, q = 0.8, 0.3
  curve = one_run_fdp.subsampled_gaussian_inverse_blow_up(z, q, 1)
  for r in (0.05, 0.35, 0.5, 0.8, 0.95):
    exact = _one_step_inverse(z, q, r)
    # Sound (the claimed curve allows at least the true tests) and close.
    assert curve(r) <= exact + 1e-9
    assert curve(r) >= exact - 0.02


def test_subsampled_curve_against_finer_pld():
  z, q, steps = 1.0, 0.1, 8
  coarse = one_run_fdp.subsampled_gaussian_inverse_blow_up(z, q, steps)
  from dp_accounting.pld import privacy_loss_distribution
  fine = privacy_loss_distribution.from_gaussian_mechanism(
      z, sampling_prob=q, value_discretization_interval=2.5e-4).self_compose(
          steps)
  eps = np.linspace(0, fine.get_epsilon_for_delta(1e-12), 3000)
  fine_curve = one_run_fdp.profile_inverse_blow_up(
      eps, fine.get_delta_for_epsilon(eps))
  for r in (0.1, 0.5, 0.9, 0.99):
    assert coarse(r) <= fine_curve(r) + 1e-6
    assert coarse(r) >= fine_curve(r) - 0.01


def test_never_rejects_randomized_response_at_its_own_count():
  # Each guess right independently with p = e^eps / (1 + e^eps): an eps-DP
  # mechanism in each coin, whose count is exactly Binomial(k, p).
  eps, m, alpha = 1.0, 400, 0.05
  p = math.exp(eps) / (1 + math.exp(eps))
  curve = one_run_fdp.profile_inverse_blow_up([eps], [0.0])
  for k in (20, 100, 400):
    # The largest c with P(C >= c) >= alpha must not be rejected.
    c = int(stats.binom.isf(alpha, k, p))
    while stats.binom.sf(c - 1, k, p) < alpha:
      c -= 1
    assert not one_run_fdp.rejects(curve, m, k, c, alpha)
  # ... and a count far out in its tail is.
  k = 100
  c = int(stats.binom.isf(1e-6, k, p)) + 1
  assert one_run_fdp.rejects(curve, m, k, c, alpha)


def test_certified_mu_holds_in_monte_carlo_and_catches_halved_noise():
  rng = np.random.default_rng(3)
  mu, m, runs, confidence = 1.0, 300, 200, 0.9
  claims = np.round(np.arange(0.0, 6.0, 0.01), 2)
  above, halved = 0, []
  for _ in range(runs):
    coins = rng.random(m) < 0.5
    found = one_run_fdp.certified(rng.normal(mu * coins, 1.0), coins,
                                  confidence,
                                  one_run_fdp.gaussian_inverse_blow_up,
                                  claims)
    above += (found or 0.0) > mu
  assert above / runs <= 1 - confidence
  for _ in range(20):
    coins = rng.random(m) < 0.5
    halved.append(one_run_fdp.certified(
        rng.normal(4 * mu * coins, 1.0), coins, confidence,
        one_run_fdp.gaussian_inverse_blow_up, claims) or 0.0)
  assert np.median(halved) > mu


def test_guess_counts_against_brute_force():
  rng = np.random.default_rng(0)
  scores = rng.normal(size=30)
  coins = rng.random(30) < 0.5
  for k in (1, 2, 7, 30):
    ranked = np.argsort(-scores)
    top, bottom = ranked[:k // 2], ranked[len(scores) - (k - k // 2):]
    expected = int(coins[top].sum() + (~coins[bottom]).sum())
    assert one_run_fdp.guess_counts(scores, coins, [k]) == [(k, expected)]
  with pytest.raises(ValueError):
    one_run_fdp.guess_counts(scores, coins, [31])

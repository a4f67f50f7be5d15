"""Empirical epsilon against dp_accounting, numerical integration, hand
counts and a Monte Carlo Gaussian mechanism with canaries."""

import dataclasses
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_mechanism
from scipy import integrate, optimize, stats

from tff_hdp.privacy import empirical_epsilon

DELTA = 1e-5


def gdp_epsilon(mu: float, delta: float) -> float:
  """dp_accounting's exact Gaussian mechanism (sensitivity 1, noise 1/mu)
  delta(eps), inverted."""
  loss = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=1 / mu,
                                                    sensitivity=1.0)
  return optimize.brentq(lambda e: loss.get_delta_for_epsilon(e) - delta, 0,
                         200, xtol=1e-13)


@pytest.mark.parametrize('mu', [0.2, 1.0, 3.0, 8.0])
def test_equal_variances_give_the_gdp_epsilon(mu):
  sigma = 0.37
  got = empirical_epsilon.gaussian_epsilon(0.1 + mu * sigma, sigma, 0.1,
                                           sigma, DELTA)
  assert got == pytest.approx(gdp_epsilon(mu, DELTA), abs=1e-6)
  # Which distribution is "in" does not matter.
  assert empirical_epsilon.gaussian_epsilon(0.1, sigma, 0.1 + mu * sigma,
                                            sigma, DELTA) == pytest.approx(
                                                got, abs=1e-9)


def test_gdp_estimate_by_hand():
  inserted, unseen = [1.0, 2.0, 3.0], [0.0, 1.0, 2.0]  # sample variances 1
  assert empirical_epsilon.gdp_estimate(inserted, unseen, 10,
                                        DELTA) == pytest.approx(
                                            gdp_epsilon(1.0, DELTA), abs=1e-6)
  # The closed-form null: mean 0, variance 1 / dim; pooled with 1.
  assert empirical_epsilon.gdp_estimate(inserted, None, 4,
                                        DELTA) == pytest.approx(
                                            gdp_epsilon(2 / math.sqrt(0.625),
                                                        DELTA), abs=1e-6)


def test_gdp_estimate_is_steady_where_the_two_gaussian_fit_swings():
  """Scores of an exact mu-GDP pair, 1,000 a side, 40 draws: chance
  differences between the two sample deviations move the reference's
  two-Gaussian fit far more, and always up (any ratio but 1 widens a
  tail)."""
  mu, rng = 0.864, np.random.default_rng(7)
  exact = gdp_epsilon(mu, DELTA)
  gdp, two = [], []
  for _ in range(40):
    inserted, unseen = rng.normal(mu, 1, 1000), rng.normal(0, 1, 1000)
    gdp.append(empirical_epsilon.gdp_estimate(inserted, unseen, 10, DELTA))
    two.append(empirical_epsilon.estimate_from_scores(inserted, unseen, 10,
                                                      DELTA))
  gdp_error = np.abs(np.array(gdp) / exact - 1)
  two_error = np.abs(np.array(two) / exact - 1)
  assert np.median(gdp_error) < 0.06 and gdp_error.max() < 0.2
  assert np.median(two_error) > 2 * np.median(gdp_error)
  assert np.mean(np.array(two) > exact) > 0.8


def _hockey_stick_by_quadrature(p, q, eps):
  f = lambda y: max(0.0, p.pdf(y) - math.exp(eps) * q.pdf(y))
  lo = min(p.mean() - 12 * p.std(), q.mean() - 12 * q.std())
  hi = max(p.mean() + 12 * p.std(), q.mean() + 12 * q.std())
  return integrate.quad(f, lo, hi, limit=500, epsabs=1e-13, epsrel=1e-10)[0]


@pytest.mark.parametrize('params', [(1.0, 1.3, 0.0, 1.0), (0.5, 0.8, 0.0, 1.0),
                                    (0.0, 1.0, 0.2, 1.05)])
def test_unequal_variances_reach_delta_exactly(params):
  eps = empirical_epsilon.gaussian_epsilon(*params, delta=1e-3)
  p, q = stats.norm(params[0], params[1]), stats.norm(params[2], params[3])
  worst = max(_hockey_stick_by_quadrature(p, q, eps),
              _hockey_stick_by_quadrature(q, p, eps))
  assert eps > 0 and worst == pytest.approx(1e-3, rel=1e-5)


def test_identical_gaussians_and_bad_arguments():
  assert empirical_epsilon.gaussian_epsilon(0.0, 1.0, 0.0, 1.0, DELTA) == 0.0
  with pytest.raises(ValueError):
    empirical_epsilon.gaussian_epsilon(0.0, 0.0, 0.0, 1.0, DELTA)


def test_clopper_pearson_closed_forms():
  # With 0 (or all) successes the exact bounds have closed forms.
  lo, hi = empirical_epsilon.clopper_pearson(0, 10, 0.05)
  assert lo == 0.0 and hi == pytest.approx(1 - 0.025**(1 / 10), rel=1e-9)
  lo, hi = empirical_epsilon.clopper_pearson(20, 20, 0.05)
  assert hi == 1.0 and lo == pytest.approx(0.025**(1 / 20), rel=1e-9)


def test_cosine_null_matches_random_directions():
  # Closed forms: in 3 dims the cosine is uniform on [-1, 1] (Archimedes);
  # in d dims its variance is 1/d.
  assert empirical_epsilon.cosine_null(3).sf(0.5) == pytest.approx(0.25)
  assert empirical_epsilon.cosine_null(1000).var() == pytest.approx(1e-3)
  rng = np.random.default_rng(0)
  x = rng.standard_normal((20000, 50))
  cosines = x[:, 0] / np.linalg.norm(x, axis=1)
  assert stats.kstest(cosines, empirical_epsilon.cosine_null(50).cdf).pvalue > 0.01


def test_lower_bound_by_hand_with_unseen_canaries():
  inserted = [2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5]
  unseen = [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 1.8, 2.2]
  # Thresholds: inserted scores ranked 1, 2, 4 or 8 from either end.
  np.testing.assert_array_equal(empirical_epsilon.threshold_grid(inserted),
                                [2.0, 2.5, 3.5, 4.0, 5.0, 5.5])
  # Confidence 0.9 split over 6 thresholds x 2 intervals: alpha = 0.1 / 12.
  # Jeffreys upper bounds (Beta(k + 1/2, 8 - k + 1/2) at 1 - alpha) of k/8:
  # k = 0: 0.3437, k = 1: 0.5321. At t = 2.0 FN = 0 (FNR <= 0.3437) and
  # FP = 1 (2.2; FPR <= 0.5321), so eps >= log((1 - delta - 0.5321) / 0.3437)
  # = 0.3083; t = 2.5 (FN = 1, FP = 0) gives the same by symmetry, and every
  # higher t has FN >= 3 (FNR >= 0.7656) and certifies nothing.
  alpha = 0.1 / 12
  assert stats.beta.ppf(1 - alpha, 0.5, 8.5) == pytest.approx(0.3437,
                                                              abs=1e-4)
  assert stats.beta.ppf(1 - alpha, 1.5, 7.5) == pytest.approx(0.5321,
                                                              abs=1e-4)
  expected = math.log((1 - DELTA - stats.beta.ppf(1 - alpha, 1.5, 7.5)) /
                      stats.beta.ppf(1 - alpha, 0.5, 8.5))
  assert expected == pytest.approx(0.3083, abs=1e-4)
  assert empirical_epsilon.lower_bound(inserted, unseen, DELTA,
                                       0.9) == pytest.approx(expected,
                                                             rel=1e-12)


def test_lower_bound_by_hand_with_the_closed_form_null():
  # In 3 dims a random direction's cosine is uniform on [-1, 1]: the FPR at
  # t is exactly (1 - t) / 2, and only the FNRs need intervals.
  inserted = [0.9, 0.8, 0.6, 0.5]
  # Thresholds 0.5, 0.6, 0.8, 0.9 (every rank is 1, 2 or 4 from an end):
  # alpha = 0.1 / 4. Best at t = 0.5: FN = 0, FNR <= Beta(0.5, 4.5) quantile
  # 0.4448, FPR = 0.25: eps >= log((1 - delta - 0.4448) / 0.25) = 0.7979.
  fnr = stats.beta.ppf(1 - 0.1 / 4, 0.5, 4.5)
  assert fnr == pytest.approx(0.4448, abs=1e-4)
  expected = math.log((1 - DELTA - fnr) / 0.25)
  assert expected == pytest.approx(0.7979, abs=1e-4)
  assert empirical_epsilon.lower_bound(inserted, None, DELTA, 0.9,
                                       dim=3) == pytest.approx(expected,
                                                               rel=1e-9)
  # Clopper-Pearson's upper bound for 0 of 4 is 1 - alpha^(1/4).
  cp = 1 - (0.1 / 4)**(1 / 4)
  assert empirical_epsilon.lower_bound(
      inserted, None, DELTA, 0.9, dim=3,
      interval='clopper_pearson') == pytest.approx(
          math.log((1 - DELTA - cp) / 0.25), rel=1e-9)
  with pytest.raises(ValueError, match='exactly one'):
    empirical_epsilon.lower_bound(inserted, None, DELTA, 0.9)


def simulate(noise_multiplier, rounds, seed, all_iterates=False,
             canaries=1000, dim=10000):
  """Cosines of inserted and unseen canaries with the released model delta.

  Every inserted canary's unit direction (its clipped update) is summed into
  every round, plus N(0, z^2 I): each canary's privacy is exactly the
  Gaussian mechanism composed over the rounds, mu = sqrt(rounds) / z. With
  all iterates released a canary's score is its largest cosine with a
  round's delta; otherwise the cosine with the sum of the rounds' deltas.
  """
  rng = np.random.default_rng(seed)
  directions = rng.standard_normal((2 * canaries, dim)).astype(np.float32)
  directions /= np.linalg.norm(directions, axis=1, keepdims=True)
  per_round = directions[:canaries].sum(axis=0)
  cosine = lambda delta: directions @ delta / np.linalg.norm(delta)
  if all_iterates:
    scores = np.max([
        cosine(per_round + noise_multiplier * rng.standard_normal(dim))
        for _ in range(rounds)
    ], axis=0)
  else:
    scores = cosine(rounds * per_round + noise_multiplier *
                    math.sqrt(rounds) * rng.standard_normal(dim))
  return scores[:canaries], scores[canaries:]


@pytest.mark.parametrize('noise_multiplier,rounds,seed', [(2.0, 4, 0),
                                                          (1.5, 1, 1)])
def test_estimate_is_tight_for_a_gaussian_mechanism(noise_multiplier, rounds,
                                                    seed):
  inserted, _ = simulate(noise_multiplier, rounds, seed)
  exact = gdp_epsilon(math.sqrt(rounds) / noise_multiplier, DELTA)
  estimate = empirical_epsilon.estimate_from_scores(inserted, None, 10000,
                                                    DELTA)
  assert estimate == pytest.approx(exact, rel=0.2)


def test_all_iterates_scores_stay_below_the_exact_epsilon():
  # The max-cosine null is no N(0, 1/d): unseen canaries give it.
  inserted, unseen = simulate(2.0, 4, 2, all_iterates=True)
  exact = gdp_epsilon(1.0, DELTA)
  result = empirical_epsilon.empirical_epsilon(inserted, unseen, 10000,
                                               DELTA)
  assert 0 < result.lower_bound < exact
  assert 0.5 * exact < result.estimate < 1.2 * exact
  assert (result.inserted, result.unseen) == (1000, 1000)


def test_lower_bound_holds_and_catches_halved_noise():
  printed = gdp_epsilon(1.0, DELTA)  # z = 2 over 4 rounds
  inserted, unseen = simulate(2.0, 4, 3)
  for scores in (unseen, None):
    result = empirical_epsilon.empirical_epsilon(inserted, scores, 10000,
                                                 DELTA)
    assert 0 < result.lower_bound < printed
  # An accountant that prints z = 2 while the noise is z = 1: the exact null
  # certifies more than the printed epsilon.
  inserted, _ = simulate(1.0, 4, 4)
  caught = empirical_epsilon.empirical_epsilon(inserted, None, 10000, DELTA)
  assert caught.lower_bound > printed
  assert caught.unseen == 0 and caught.confidence == 0.95


def test_lower_bound_coverage_by_monte_carlo():
  # Scores of an exact mu-GDP pair (mu = 1, delta = 0.01): at confidence 0.9
  # at most 10% of the bounds may exceed the true epsilon 2.318; the best
  # of them still comes close.
  exact = gdp_epsilon(1.0, 1e-2)
  rng = np.random.default_rng(5)
  bounds = np.array([
      empirical_epsilon.lower_bound(rng.normal(1, 1, 1000),
                                    rng.normal(0, 1, 1000), 1e-2, 0.9)
      for _ in range(200)
  ])
  assert np.mean(bounds > exact) <= 0.1
  assert bounds.max() > 0.75 * exact


@pytest.mark.parametrize('rate,steps,z', [(1.0, 2, 2.0), (0.01, 20000, 3.0),
                                          (0.3, 50, 0.8)])
def test_expected_example_mu_by_monte_carlo(rate, steps, z):
  """Scores simulated step by step (Bernoulli joins, Gaussian noise along
  each canary's direction, units of c / B) give the pooled fit's mu."""
  rng = np.random.default_rng(4)
  canaries = 20000
  joined = rng.binomial(steps, rate, size=canaries)
  inserted = joined + z * math.sqrt(steps) * rng.standard_normal(canaries)
  unseen = z * math.sqrt(steps) * rng.standard_normal(canaries)
  pooled = math.sqrt((inserted.var(ddof=1) + unseen.var(ddof=1)) / 2)
  measured = (inserted.mean() - unseen.mean()) / pooled
  expected = empirical_epsilon.expected_example_mu(rate, steps, z)
  assert measured == pytest.approx(expected, abs=4 * math.sqrt(2 / canaries))
  if rate == 1.0:
    assert expected == pytest.approx(math.sqrt(steps) / z)


@pytest.mark.parametrize('k', [100, 1000, 2000, 10_000])
def test_lower_bound_capacity_is_the_perfect_separation_bound(k):
  """With FN = FP = 0 at the one threshold perfectly separated scores
  offer, the bound is log((1 - delta - U) / U), U the Jeffreys upper
  limit on a zero count at alpha = 5% / 2: 3.67 at K = 100, 5.99 at 1,000,
  6.68 at 2,000, 8.29 at 10,000."""
  upper = stats.beta.ppf(1 - 0.05 / 2, 0.5, k + 0.5)
  expected = math.log((1 - DELTA - upper) / upper)
  got = empirical_epsilon.lower_bound_capacity(k, k, DELTA, 0.95)
  assert got == pytest.approx(expected, rel=1e-9)
  assert got == pytest.approx({100: 3.67, 1000: 5.99, 2000: 6.68,
                               10_000: 8.29}[k], abs=0.01)
  # Scores far apart, each distinct, split alpha over more thresholds and
  # certify less.
  rng = np.random.default_rng(k)
  assert got - 1 < empirical_epsilon.lower_bound(
      rng.normal(100, 1, k), rng.normal(0, 1, k), DELTA, 0.95) < got


def _mu_of(epsilon):
  return optimize.brentq(
      lambda mu: empirical_epsilon.gaussian_epsilon(mu, 1, 0, 1, DELTA) -
      epsilon, 1e-9, 50, xtol=1e-12)


@pytest.mark.parametrize('k,printed,audits', [
    (1000, 1.0, 1), (1000, 4.0, 1), (1000, 8.0, 1), (4000, 4.0, 1),
    (200, 3.6, 1), (1000, 4.0, 8)])
def test_the_alarm_fires_in_at_most_5_percent_of_correct_runs(k, printed,
                                                              audits):
  """At the boundary of a correct run (scores an exact mu-GDP pair whose
  epsilon is the printed one), 2,000 runs of `audits` audits each: the
  share of runs with any alarm is at most 5% (plus three Monte Carlo
  standard errors), and not far below it, so the test spends its level.
  Above the capacity of K canaries' lower bound too (8.0 at K = 1,000)."""
  rng = np.random.default_rng(k + audits)
  mu = _mu_of(printed)
  # In mu, where estimate_lower_limit's epsilon is monotone (and fast).
  assert empirical_epsilon.estimate_lower_limit(
      rng.normal(mu + 0.5, 1, k), rng.normal(0, 1, k), 10, DELTA, 0.95) > (
          printed)
  runs, alarms = 2000, 0
  for _ in range(runs):
    fired = False
    for _ in range(audits):
      inserted, unseen = rng.normal(mu, 1, k), rng.normal(0, 1, k)
      fired |= empirical_epsilon.lower_limit_mu(
          inserted, unseen, 10, 1 - 0.05 / audits) > mu
    alarms += fired
  rate = alarms / runs
  assert 0.02 < rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs), rate


@pytest.mark.parametrize('k,printed', [(1000, 4.0), (1000, 8.0),
                                       (100, 4.0)])
def test_the_alarm_fires_on_half_the_noise(k, printed):
  """Half the noise doubles mu: true epsilon 8.4 against a printed 4, and
  23.5 against 8, beyond what K = 1,000 canaries' lower bound can show."""
  rng = np.random.default_rng(int(k * printed))
  mu = 2 * _mu_of(printed)
  fired = 0
  for _ in range(40):
    inserted, unseen = rng.normal(mu, 1, k), rng.normal(0, 1, k)
    audit = empirical_epsilon.empirical_epsilon(inserted, unseen, 10, DELTA)
    assert audit.lower_bound <= audit.lower_bound_capacity
    fired += empirical_epsilon.alarm(dataclasses.asdict(audit), printed)
  assert fired == 40

"""Privacy without sampling: each computation against an independent one.

The tree's dynamic program against every participation pattern (brute force
over the tree's strategy matrix) and against TF Privacy's tree accountant; the
Toeplitz rule against every pattern; the Gaussian mechanism's epsilon against
dp_accounting's PLD accountant; and Gboard's es-ES numbers (Xu et al. 2023).
"""

import itertools

import math

import dp_accounting
import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.stats

from tests.privacy import strategy_oracles as oracles
from tff_hdp.privacy import min_separation as ms


@pytest.mark.parametrize('rounds,b,k', [
    (n, b, k) for n, b, k in itertools.product((1, 5, 8, 12, 13, 16),
                                               (1, 2, 3, 5), (1, 2, 3))])
def test_tree_program_equals_every_pattern(rounds, b, k):
  model = ms.MinSeparation(rounds, b, k)
  want = oracles.brute_force_sensitivity_squared(
      oracles.tree_strategy_matrix(rounds), model)
  assert ms.tree_sensitivity_squared(model) == want


@pytest.mark.tf  # tensorflow_privacy's package imports TensorFlow
@pytest.mark.parametrize('rounds,b,k', [(100, 7, 4), (257, 20, 5), (64, 1, 3),
                                        (300, 45, 6)])
def test_tree_program_equals_tf_privacy(rounds, b, k):
  from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant as tree  # pylint: disable=g-import-not-at-top
  model = ms.MinSeparation(rounds, b, k)
  rho = tree.compute_zcdp_single_tree(1.0, rounds, k, b - 1)
  assert ms.tree_sensitivity_squared(model) == pytest.approx(2 * rho,
                                                             rel=1e-12)


def _decreasing(rng, n):
  return np.concatenate([[1.0], np.sort(rng.uniform(0, 1, n - 1))[::-1]])


@pytest.mark.parametrize('rounds,b,k', [(9, 2, 3), (12, 3, 4), (10, 4, 2),
                                        (11, 1, 3)])
def test_toeplitz_earliest_pattern_is_the_worst(rounds, b, k):
  rng = np.random.default_rng(rounds * 100 + b * 10 + k)
  model = ms.MinSeparation(rounds, b, k)
  for _ in range(5):
    c = _decreasing(rng, rounds)
    assert ms.toeplitz_sensitivity_squared(c, model) == pytest.approx(
        oracles.brute_force_sensitivity_squared(oracles.toeplitz_matrix(c),
                                                model), rel=1e-12)


def test_toeplitz_refuses_coefficients_it_cannot_bound():
  with pytest.raises(ValueError, match='non-increasing'):
    ms.toeplitz_sensitivity_squared([1.0, 0.5, 0.7], ms.MinSeparation(3, 1, 2))
  with pytest.raises(ValueError, match='non-negative'):
    ms.toeplitz_sensitivity_squared([1.0, -0.1, -0.2],
                                    ms.MinSeparation(3, 1, 2))
  with pytest.raises(ValueError, match='need 5'):
    ms.toeplitz_sensitivity_squared([1.0, 0.5], ms.MinSeparation(5, 1, 2))


@pytest.mark.parametrize('mu,delta', [(0.3, 1e-5), (1.0, 1e-6), (2.5, 1e-10),
                                      (0.05, 1e-3)])
def test_gaussian_epsilon_equals_dp_accounting(mu, delta):
  pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  pld.compose(dp_accounting.GaussianDpEvent(1.0 / mu))
  got = ms.gaussian_epsilon(mu, delta)
  # PLD rounds pessimistically: never below the exact value, and close.
  assert got <= pld.get_epsilon(delta) + 1e-9
  assert got == pytest.approx(pld.get_epsilon(delta), abs=2e-3)
  assert ms.gaussian_mu(got, delta) == pytest.approx(mu, rel=1e-8)


def test_gboard_es_es_accounting():
  """Xu et al. 2023 (Gboard DP-FTRL), es-ES: z = 7, 2,000 rounds, min
  separation 313, at most 6 participations: rho 0.81 zCDP, eps 8.90 at 1e-10
  through the RDP conversion they used; the exact Gaussian curve of the same
  release gives less (8.53), and is what a run prints."""
  model = ms.MinSeparation(2000, 313, 6)
  rho = ms.tree_sensitivity_squared(model) / (2 * 7.0 ** 2)
  assert round(rho, 2) == 0.81
  assert round(ms.zcdp_epsilon(rho, 1e-10), 2) == 8.90
  exact = ms.gaussian_epsilon((2 * rho) ** 0.5, 1e-10)
  assert round(exact, 2) == 8.53
  assert exact < ms.zcdp_epsilon(rho, 1e-10)


def test_model_counts_and_refuses():
  model = ms.MinSeparation(2000, 313, 6)
  assert model.reachable_participations == 6
  assert ms.MinSeparation(10, 4, 6).reachable_participations == 3  # 0, 4, 8
  assert model.allows([0, 313, 626])
  assert not model.allows([0, 312])
  assert not model.allows(range(0, 2000, 313))  # 7 participations
  with pytest.raises(ValueError, match='min_separation'):
    ms.MinSeparation(10, 0, 1)


def _hockey_stick_epsilon(mu, delta):
  """Independent of the closed form: delta(eps) as the integral of
  (p - e^eps q)^+ for p = N(mu, 1), q = N(0, 1), solved for eps."""
  def delta_at(eps):
    crossing = eps / mu + mu / 2  # p > e^eps q to the right of it
    p = scipy.integrate.quad(scipy.stats.norm(mu, 1).pdf, crossing, np.inf,
                             epsabs=1e-14)[0]
    q = scipy.integrate.quad(scipy.stats.norm(0, 1).pdf, crossing, np.inf,
                             epsabs=1e-14)[0]
    return p - math.exp(eps) * q - delta
  return scipy.optimize.brentq(delta_at, 1e-9, 100, xtol=1e-13)


@pytest.mark.parametrize('mu,delta', [(0.3, 1e-5), (1.0, 1e-6), (2.5, 1e-10)])
def test_gaussian_epsilon_equals_the_hockey_stick_integral(mu, delta):
  assert ms.gaussian_epsilon(mu, delta) == pytest.approx(
      _hockey_stick_epsilon(mu, delta), abs=1e-6)


@pytest.mark.parametrize('epsilon,b,k,count_std', [
    (1.0, 100, 4, None), (8.0, 100, 4, 30.0), (2.0, 50, 3, 10.0)])
def test_calibrated_noise_meets_the_target_by_an_independent_account(
    epsilon, b, k, count_std):
  """The calibrated z composes the tree's release with the k clip-count
  answers; the composition is recomputed by dp_accounting's PLD accountant
  (each Gaussian as its own event) and the epsilon by the integral."""
  model = ms.MinSeparation(400, b, k)
  sens2 = ms.tree_sensitivity_squared(model)
  z = ms.calibrate_noise_multiplier(epsilon, 1e-6, model, sens2, count_std)
  mu = ms.device_mu(model, sens2, z, count_std)
  assert _hockey_stick_epsilon(mu, 1e-6) == pytest.approx(epsilon, abs=1e-6)
  pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  pld.compose(dp_accounting.GaussianDpEvent(z / math.sqrt(sens2)))
  if count_std is not None:
    pld.compose(dp_accounting.GaussianDpEvent(2 * count_std),
                model.reachable_participations)
  assert pld.get_epsilon(1e-6) == pytest.approx(epsilon, abs=5e-3)


def test_a_target_the_clip_count_alone_exceeds_is_refused():
  model = ms.MinSeparation(2000, 313, 6)
  with pytest.raises(ValueError, match='clip count'):
    ms.calibrate_noise_multiplier(0.5, 1e-6, model, 79.0, clip_count_stddev=1.0)

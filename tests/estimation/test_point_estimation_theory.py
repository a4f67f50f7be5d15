"""The closed forms agree with each other and with a direct minimisation."""

import numpy as np
import pytest

from tff_hdp.estimation import point_estimation_theory as th

SETTINGS = [
    th.PointEstimationSetting(20, 19, 10, 0.1, 1.0, 0.05),
    th.PointEstimationSetting(1000, 950, 30, 0.5, 2.0, 0.002),
    th.PointEstimationSetting(50, 10, 5, 0.01, 1.0, 1.0),
]


@pytest.mark.parametrize('s', SETTINGS)
def test_variances_at_optimum_and_r1(s):
  assert th.server_variance(s, th.optimal_ratio(s)) == pytest.approx(
      th.server_variance_optimal(s), rel=1e-12)
  assert th.server_variance(s, 1.0) == pytest.approx(
      th.server_variance_fedavg(s), rel=1e-12)


@pytest.mark.parametrize('s', SETTINGS)
def test_optimal_ratio_minimises_a_grid(s):
  grid = np.linspace(0.0, 1.0, 20001)
  values = [th.server_variance(s, r) for r in grid]
  assert grid[int(np.argmin(values))] == pytest.approx(th.optimal_ratio(s),
                                                       abs=1e-4)


@pytest.mark.parametrize('s', SETTINGS)
def test_gaps(s):
  assert th.gap_fedavg(s) == pytest.approx(
      th.server_variance_fedavg(s) - th.server_variance_optimal(s), rel=1e-9)
  assert th.gap_dp_fedavg(s) == pytest.approx(
      th.server_variance_dp_fedavg(s) - th.server_variance_optimal(s),
      rel=1e-9)


def test_lambda_limits():
  # Homogeneous data and privacy: lambda_p* -> N / Gamma^2 (paper, §3.4).
  s = th.PointEstimationSetting(100, 99, 10, 1e-9, 1.0, 0.3)
  gamma2 = s.private_noise / s.alpha2
  assert th.optimal_lambda_private(s) == pytest.approx(
      (100 + gamma2 * 1) / gamma2, rel=1e-5)
  assert th.optimal_lambda_non_private(
      th.PointEstimationSetting(10, 5, 4, 0.5, 2.0, 0.1)) == pytest.approx(1.0)


def test_level_ratios_reduce_to_lemma_1_with_one_private_group():
  s = th.PointEstimationSetting(40, 30, 5, 0.05, 0.5, 0.2)
  levels = th.LevelsSetting((10, 30), 5, 0.05, 0.5, (0.0, 0.2))
  assert th.optimal_level_ratios(levels) == pytest.approx(
      [1.0, th.optimal_ratio(s)], rel=1e-12)
  for r in (0.01, 0.3, 1.0):
    assert th.level_server_variance(levels, [1.0, r]) == pytest.approx(
        th.server_variance(s, r), rel=1e-12)
  assert th.level_server_variance_optimal(levels) == pytest.approx(
      th.server_variance_optimal(s), rel=1e-12)


def test_level_ratios_minimize_the_server_variance():
  """No perturbation of the optimal ratios lowers the closed-form variance
  (a grid around each, independent of the inverse-variance argument)."""
  s = th.LevelsSetting((5, 20, 20, 20), 10, 0.1, 1.0, (0.0, 0.2, 0.03, 0.005))
  best = th.optimal_level_ratios(s)
  v = th.level_server_variance(s, best)
  rng = np.random.default_rng(0)
  for _ in range(500):
    other = [r * np.exp(rng.normal(0, 0.5)) for r in best]
    assert th.level_server_variance(s, other) >= v * (1 - 1e-12)


@pytest.mark.parametrize('s', SETTINGS)
def test_level_lambdas_at_two_classes_are_lemma_10(s):
  """An opted-out group without noise and one private group at r*:
  lambda_np* is Lemma 10's 1 / Upsilon^2 exactly, lambda_p* within 2% of its
  eq. (53) (an average of three stationary expressions, eq. 45, where ours
  is the exact minimiser)."""
  levels = th.LevelsSetting((s.num_non_private, s.num_private),
                            s.samples_per_client, s.tau2, s.beta2,
                            (0.0, s.gamma2))
  lam_np, lam_p = th.optimal_level_lambdas(levels, [1.0, th.optimal_ratio(s)])
  assert lam_np == pytest.approx(th.optimal_lambda_non_private(s), rel=1e-9)
  assert lam_p == pytest.approx(th.optimal_lambda_private(s), rel=0.02)
  assert lam_p <= lam_np  # Lemma 10's order


def test_level_lambdas_of_noisy_local_estimates_are_mr_mtl_eq_7():
  """One group of many silos whose estimates carry their own DP noise:
  lambda* = (sigma^2 + sigma_DP^2 / n) / (n tau^2), MR-MTL's eq. (7), with
  sigma^2 the per-sample variance and sigma_DP^2 / n^2 the estimate's noise."""
  n, sigma2, sigma_dp2, tau2 = 20, 1.5, 40.0, 0.3
  for silos in (10**9,):
    levels = th.LevelsSetting((silos,), n, tau2, sigma2, (0.0,),
                              (sigma_dp2 / n**2,))
    (lam,) = th.optimal_level_lambdas(levels, [1.0])
    assert lam == pytest.approx((sigma2 + sigma_dp2 / n) / (n * tau2),
                                rel=1e-6)


def test_level_lambdas_minimise_the_personal_mse():
  """No other lambda lowers E(lambda) = (A + 2 lambda C + lambda^2 B) /
  (1 + lambda)^2, its moments written out independently per group."""
  s = th.LevelsSetting((5, 20, 20), 10, 0.1, 1.0, (0.0, 0.2, 0.01),
                       (0.0, 0.1, 0.5))
  ratios = [1.0, 0.3, 0.8]
  sizes = np.array(s.group_sizes, float)
  w = np.array(ratios) * sizes / np.sum(np.array(ratios) * sizes)
  alpha2 = np.array(s.alpha2s)
  v = np.sum(w**2 * ((s.tau2 + alpha2) / sizes + np.array(s.gamma2s)))
  c = w / sizes
  grid = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 20001))
  for j, lam in enumerate(th.optimal_level_lambdas(s, ratios)):
    a, cc, b = alpha2[j], c[j] * alpha2[j], v + s.tau2 - 2 * c[j] * s.tau2
    mse = (a + 2 * grid * cc + grid**2 * b) / (1 + grid)**2
    assert lam == pytest.approx(grid[np.argmin(mse)], rel=1e-3)

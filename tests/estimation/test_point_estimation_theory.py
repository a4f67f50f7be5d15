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

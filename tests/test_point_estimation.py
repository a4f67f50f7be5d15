"""Monte Carlo through the real aggregator against the closed-form oracle."""

import pytest

from tasks import point_estimation as pe
from tff_hdp import point_estimation_theory as th

TRIALS = 20000  # relative std of a variance estimate: sqrt(2/T) = 1%


@pytest.mark.parametrize('setting', [
    th.PointEstimationSetting(20, 19, 10, 0.1, 1.0, 0.05),
    th.PointEstimationSetting(40, 30, 5, 0.05, 0.5, 0.2),
])
def test_server_mse_matches_theory_and_r_star_wins(setting):
  r_star = th.optimal_ratio(setting)
  opt, fedavg = pe.monte_carlo(setting, [r_star, 1.0], TRIALS, seed=3)
  assert opt.empirical_mse == pytest.approx(
      th.server_variance_optimal(setting), rel=0.05)
  assert fedavg.empirical_mse == pytest.approx(
      th.server_variance_fedavg(setting), rel=0.05)
  # Paired on the same client draws, so the comparison is sharp.
  assert opt.empirical_mse < fedavg.empirical_mse


def test_too_large_estimates_are_refused():
  s = th.PointEstimationSetting(3, 1, 1, 0.1, 1.0, 0.1)
  with pytest.raises(ValueError, match='no-clipping'):
    pe.monte_carlo(s, [1.0], 10, seed=0, phi=1e7)

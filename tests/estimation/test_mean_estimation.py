"""MR-MTL on federated mean estimation, run through the real process, against
the closed form E(lambda) (SPEC.md §2)."""

import numpy as np
import pytest

from tff_hdp.estimation import mean_estimation
from tff_hdp.estimation import mean_estimation_theory as theory

pytestmark = pytest.mark.tf

# Two noise levels; lambda* = 3.33 and 1.25 lie inside the lambda range.
SETTINGS = {
    'high_noise': theory.MeanEstimationSetting(
        num_silos=10, samples=20, sigma=1.0, tau=0.3, sigma_dp=10.0),
    'low_noise': theory.MeanEstimationSetting(
        num_silos=10, samples=20, sigma=1.0, tau=0.3, sigma_dp=5.0),
}
LAMBDAS = [0.0, 0.3, 1.0, 3.0, 10.0]
TRIALS = 4000


# The tests of one setting read its one measurement: one xdist worker runs
# them.
@pytest.fixture(scope='module', params=[
    pytest.param(name, marks=pytest.mark.xdist_group(
        f'test_mean_estimation_{name}')) for name in sorted(SETTINGS)])
def measured(request):
  setting = SETTINGS[request.param]
  star = setting.optimal_lambda
  lambdas = sorted(set(LAMBDAS + [star / 4, star / 2, star, 2 * star,
                                  4 * star]))
  return setting, mean_estimation.mrmtl_errors(setting, lambdas, TRIALS,
                                               seed=1)


def test_theory_matches_its_limits():
  s = SETTINGS['high_noise']
  # lambda = 0 is local training: error sigma_loc^2.
  assert s.expected_error(0.0) == pytest.approx(s.local_variance)
  # lambda -> inf is FedAvg: (1 - 1/K) tau^2 + sigma_loc^2 / K.
  assert s.expected_error(1e9) == pytest.approx(
      (1 - 1 / s.num_silos) * s.tau**2 + s.local_variance / s.num_silos,
      rel=1e-6)
  grid = np.linspace(0.0, 20.0, 20001)
  best = grid[np.argmin([s.expected_error(l) for l in grid])]
  assert best == pytest.approx(s.optimal_lambda, abs=2e-3)


def test_empirical_error_matches_closed_form_within_5_percent(measured):
  setting, errors = measured
  for lam in LAMBDAS:
    assert errors[lam] == pytest.approx(setting.expected_error(lam),
                                        rel=0.05), lam


def test_empirical_best_lambda_is_lambda_star(measured):
  setting, errors = measured
  star = setting.optimal_lambda
  near = {l: e for l, e in errors.items()
          if l in (star / 4, star / 2, star, 2 * star, 4 * star)}
  assert min(near, key=near.get) == pytest.approx(star)
  # And lambda* beats both ends of the personalization spectrum.
  assert errors[star] < errors[0.0]
  assert errors[star] < errors[10.0] or star > 10.0

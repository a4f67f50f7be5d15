"""Monte Carlo through the real aggregator against the closed-form oracle."""

import numpy as np
import pytest

from tff_hdp.estimation import point_estimation as pe
from tff_hdp.estimation import point_estimation_theory as th

pytestmark = pytest.mark.tf

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


def test_ditto_optimal_lambdas_beat_other_lambdas():
  # Many non-private clients so the non-private MSE is well estimated too.
  setting = th.PointEstimationSetting(30, 20, 5, 0.3, 1.0, 0.02)
  lam_p = th.optimal_lambda_private(setting)
  lam_np = th.optimal_lambda_non_private(setting)
  factors = [0.25, 0.5, 1.0, 2.0, 4.0]
  mse = pe.personalized_mse(
      setting, th.optimal_ratio(setting),
      [f * lam for lam in (lam_p, lam_np) for f in factors], 20000, seed=5)
  private = {lam: m[0] for lam, m in mse.items()}
  non_private = {lam: m[1] for lam, m in mse.items()}
  for f in factors:
    if f != 1.0:
      assert private[lam_p] < private[f * lam_p]
      assert non_private[lam_np] < non_private[f * lam_np]


# Three private levels and a group without noise (the first), and three
# private levels alone: each group's mean noise gamma_j^2 as a strict, a middle
# and a lenient epsilon would give it.
LEVELS = [
    th.LevelsSetting((5, 20, 20, 20), 10, 0.1, 1.0, (0.0, 0.2, 0.03, 0.005)),
    th.LevelsSetting((30, 30, 30), 5, 0.05, 0.5, (0.3, 0.05, 0.01)),
]


@pytest.mark.parametrize('setting', LEVELS)
def test_three_levels_match_theory_and_the_optimal_ratios_win(setting):
  """The aggregator's server MSE against the closed form within 5% (about 5
  standard errors at 20,000 trials) for the optimal ratios, r = 1 for
  every group, and r_j = 1 / gamma_j^2 for the private ones; and the optimal
  ratios' MSE is the smallest, paired on the same client draws."""
  optimal = th.optimal_level_ratios(setting)
  one = [1.0] * len(optimal)
  inverse = [1.0 if g2 == 0 else 1.0 / g2 for g2 in setting.gamma2s]
  results = pe.monte_carlo_levels(setting, [optimal, one, inverse], TRIALS,
                                  seed=11)
  for result in results:
    assert result.relative_error < 0.05, result
  assert results[0].theoretical_variance == pytest.approx(
      th.level_server_variance_optimal(setting), rel=1e-12)
  assert results[0].empirical_mse < min(r.empirical_mse for r in results[1:])


# A group without noise and three private levels (client-level DP at the
# server), and three groups of silos whose estimates carry their own DP-SGD
# noise (cross-silo, no server noise).
LAMBDA_LEVELS = [
    th.LevelsSetting((4, 10, 10, 10), 10, 0.1, 1.0, (0.0, 0.2, 0.03, 0.005)),
    th.LevelsSetting((10, 10, 10), 5, 0.05, 0.5, (0.0, 0.0, 0.0),
                     (0.5, 0.1, 0.02)),
]


@pytest.mark.parametrize('setting', LAMBDA_LEVELS)
def test_each_levels_optimal_lambda_found_by_simulation_is_the_closed_form(
    setting):
  """Through the real FedHDP round and Ditto step, each group's lambda of
  least personal MSE is the closed form's within 4 standard errors and
  within 10%, at the optimal ratios."""
  ratios = th.optimal_level_ratios(setting)
  found, error = pe.empirical_optimal_lambdas(setting, ratios,
                                              (0.05, 0.5, 5.0), 10000, seed=7)
  closed = np.array(th.optimal_level_lambdas(setting, ratios))
  assert np.all(np.abs(found - closed) < 4 * error), (found, error, closed)
  assert np.all(np.abs(found / closed - 1) < 0.1), (found, closed)


def test_each_group_is_pulled_with_its_own_lambda():
  """One Ditto step with a lambda per group leaves each group where a step
  with its lambda for everyone does: each level's lambda reaches its
  clients."""
  setting = th.LevelsSetting((3, 3, 3), 5, 0.1, 1.0, (0.0, 0.1, 0.01))
  ratios = th.optimal_level_ratios(setting)
  lambdas = [0.2, 2.0, 0.7]
  mixed, *alone = pe.personalized_level_errors(
      setting, ratios, [lambdas] + [[lam] * 3 for lam in lambdas], 2000,
      seed=1)
  for j in range(3):
    np.testing.assert_allclose(mixed[j], alone[j][j], rtol=1e-4, atol=1e-7)
  assert not np.allclose(mixed[1], alone[0][1], rtol=1e-2)

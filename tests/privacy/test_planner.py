"""The planner: each rule's noise on the mean equals the arithmetic written
out here from its plan's z_j, q_j and weights, and the best one-noise
plan's certificate bounds every plan of a brute-force grid."""

import math

import numpy as np
import pytest

from tff_hdp.privacy import accounting
from tff_hdp.privacy import planner
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg

LEVELS = [pg.PrivacyGroup('eps1', 1.0, 1e-3),
          pg.PrivacyGroup('eps3', 3.0, 1e-3),
          pg.PrivacyGroup('eps8', 8.0, 1e-3)]
D, H = 500, 2.0  # the model's parameters, the heterogeneity
# The tests that read the module's `rules`: one xdist worker plans them.
_RULES = pytest.mark.xdist_group('test_planner_rules')


@pytest.fixture(scope='module')
def rules():
  choices = pg.assign_opt_out(list(range(600)), LEVELS, 0.1, seed=0,
                              private_fractions=[0.5, 0.3, 0.2])
  return {r.algorithm: r for r in planner.plan_rules(
      choices, accounting.PoissonSampling(0.1), 30,
      plans.ClipSettings(learning_rate=0.0), D, H)}


def _counts(plan):
  return np.array(plan.rates()) * plan.assignment.group_sizes()


@_RULES
def test_fedhdp_noise_is_the_weighted_sum_of_its_draws(rules):
  for name, own_ratios in (('fedhdp --r=1', lambda z, n: 1.0),
                           ('fedhdp', lambda z, n: 1.0 if z == 0 else
                            H * n / (H * n + D * z**2))):
    plan = rules[name].plan
    z = np.array(plan.noise_multipliers)
    n = _counts(plan)
    r = np.array([own_ratios(a, b) for a, b in zip(z, n)])
    w = r * n / (r * n).sum()
    np.testing.assert_allclose(rules[name].weights(), w, rtol=1e-12)
    private = z > 0
    released = math.sqrt(np.sum((w * z / n)[private]**2))
    share = w[private].sum()
    assert rules[name].divisors == pytest.approx(
        (1 / released, share / released), rel=1e-12)
  assert rules['fedhdp'].divisors[0] > rules['fedhdp --r=1'].divisors[0]


@_RULES
def test_individualized_sampling_is_one_draw_on_the_private_sum(rules):
  plan = rules['individualized_sampling'].plan
  z = max(plan.noise_multipliers)
  n = _counts(plan)
  private = np.array([g.is_private for g in plan.assignment.groups])
  merged = n[private].sum()
  r = H * merged / (H * merged + D * z**2)  # the opt-out group's ratio is 1
  share = r * merged / (r * merged + n[~private].sum())
  assert rules['individualized_sampling'].divisors == pytest.approx(
      (merged / (share * z), merged / z), rel=1e-12)


@_RULES
def test_dp_fedavg_is_everyone_at_the_strictest(rules):
  plan = rules['dp_fedavg'].plan
  (z,) = plan.noise_multipliers
  assert z == rules['fedhdp'].plan.noise_multipliers[0]  # eps 1's
  assert rules['dp_fedavg'].divisors == pytest.approx(
      (0.1 * 600 / z,) * 2, rel=1e-12)


def _least_noise(group, q, rounds, accountant=accounting.RDP):
  try:
    return accounting.calibrate_noise_multiplier(
        group.epsilon, group.delta, accounting.PoissonSampling(q, accountant),
        rounds, None)
  except accounting.InfeasiblePrivacyTargetError:
    return math.inf


def test_no_plan_of_a_brute_force_grid_passes_the_certificate():
  levels = [pg.PrivacyGroup('eps0.5', 0.5, 1e-3),
            pg.PrivacyGroup('eps6', 6.0, 1e-3)]
  choices = pg.assign_by_fractions(list(range(400)), levels, [0.6, 0.4], 0)
  rounds, q = 20, 0.1
  one = plans.plan_individualized_sampling(
      choices, accounting.PoissonSampling(q), rounds,
      plans.ClipSettings(learning_rate=0.0))
  best = planner.best_one_noise_plan(one, tolerance=0.01)
  sizes, budget = choices.group_sizes(), q * 400
  grids = [np.geomspace(1 / n, min(1.0, budget / n), 40) for n in sizes]
  signal = [[n * r / _least_noise(g, r, rounds) for r in grid]
            for g, n, grid in zip(levels, sizes, grids)]
  brute = max(a + b for (q0, a) in zip(grids[0], signal[0])
              for (q1, b) in zip(grids[1], signal[1])
              if q0 * sizes[0] + q1 * sizes[1] <= budget)
  assert brute <= best.divisor_bound
  assert brute <= best.divisor * (1 + best.certified_gap)
  assert best.divisor >= budget / max(one.noise_multipliers)
  # The plan returned meets each target at its rate with noise z / a_j.
  for g, rate, rho in zip(levels, best.rates, best.noise_multipliers):
    assert accounting.epsilon_spent(
        rho, None, accounting.PoissonSampling(rate), rounds,
        g.delta) <= g.epsilon * (1 + 1e-9)
  assert sum(r * n for r, n in zip(best.rates, sizes)) <= budget * (1 + 1e-9)
  assert best.divisor == pytest.approx(sum(
      n * r / rho for n, r, rho in zip(sizes, best.rates,
                                       best.noise_multipliers)), rel=1e-12)

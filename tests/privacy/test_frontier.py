"""The bias/noise frontier's plans: the ends are the existing rules (t = 1
individualized sampling's rates and z, t = 0 every client counting the same
in expectation), every group's epsilon is dp_accounting's for its rate and
multiplier computed here from scratch, and the noise divisor and the
worst-group bound are the module docstring's closed forms."""

import math

import numpy as np
import pytest

from tests.privacy.test_individualized_sampling import dp_accounting_epsilon
from tff_hdp.privacy import accounting
from tff_hdp.privacy import frontier
from tff_hdp.privacy import planner
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg

LEVELS = [pg.PrivacyGroup('eps1', 1.0, 1e-4),
          pg.PrivacyGroup('eps3.6', 3.6, 1e-4),
          pg.PrivacyGroup('eps10', 10.0, 1e-4)]
ROUNDS, Q, Z_B, D, H = 200, 0.05, 5.0, 7850, 1.0
SAMPLING = accounting.PoissonSampling(Q)
CLIP = plans.ClipSettings(count_stddev=Z_B)
# The tests that read the module's `curves`: one xdist worker plans them.
_CURVES = pytest.mark.xdist_group('test_frontier_curves')


@pytest.fixture(scope='module')
def choices():
  return pg.assign_opt_out(list(range(1200)), LEVELS, 0.1, seed=0)


@pytest.fixture(scope='module')
def individualized(choices):
  return plans.plan_individualized_sampling(choices, SAMPLING, ROUNDS, CLIP)


@pytest.fixture(scope='module')
def curves(individualized):
  return frontier.Frontier(individualized)


@_CURVES
def test_full_tilt_is_individualized_sampling(curves, individualized):
  plan = curves.plan(1.0, H, D)
  np.testing.assert_allclose(plan.group_rates, individualized.group_rates,
                             rtol=1e-9)
  np.testing.assert_allclose(plan.noise_multipliers,
                             individualized.noise_multipliers, rtol=1e-9)
  np.testing.assert_allclose(plan.group_scales, 1.0, rtol=1e-9)
  assert planner.noise_divisors(plan)[1] == pytest.approx(
      planner.noise_divisors(individualized)[1], rel=1e-9)
  # The search itself runs into that end: just below t = 1 it finds
  # individualized sampling's rates and z.
  near = curves.plan(0.999, H, D)
  np.testing.assert_allclose(near.group_rates, individualized.group_rates,
                             rtol=5e-3)
  np.testing.assert_allclose(near.noise_multipliers,
                             individualized.noise_multipliers, rtol=5e-3)


@_CURVES
def test_no_tilt_counts_every_client_alike(curves, choices):
  plan = curves.plan(0.0, H, D)
  counted = np.array(plan.group_scales) * np.array(plan.group_rates)
  np.testing.assert_allclose(counted, counted[0], rtol=1e-9)
  # So each group's share of the mean is its share of the clients.
  sizes = choices.group_sizes()
  point = [p for p in plan.frontier if p.tilt == 0][0]
  np.testing.assert_allclose(point.shares, sizes / sizes.sum(), rtol=1e-3)
  # The strict group is sampled more often than under individualized
  # sampling, the loose one less.
  assert plan.group_rates[0] > curves.base_rates[0]
  assert plan.group_rates[2] < curves.base_rates[2]


@_CURVES
@pytest.mark.parametrize('tilt', [0.0, 0.3, 0.75, 1.0])
def test_every_group_within_its_target_by_dp_accounting(curves, tilt):
  plan = curves.plan(tilt, H, D)
  assert plan.ledger.first_exceeded(ROUNDS) is None
  for j, group in enumerate(plan.assignment.groups):
    if not group.is_private:
      assert plan.noise_multipliers[j] == 0
      assert plan.group_rates[j] == Q
      continue
    want = dp_accounting_epsilon(plan.noise_multipliers[j], Z_B,
                                 plan.group_rates[j], ROUNDS, group.delta)
    assert plan.ledger.epsilon(j, ROUNDS) == pytest.approx(want, rel=1e-9)
    assert want <= group.epsilon * (1 + 1e-9)
  # The group that sets z spends (nearly) all of its target.
  tight = [dp_accounting_epsilon(plan.noise_multipliers[j], Z_B,
                                 plan.group_rates[j], ROUNDS, g.delta)
           / g.epsilon
           for j, g in enumerate(plan.assignment.groups) if g.is_private]
  assert max(tight) == pytest.approx(1.0, rel=1e-3)


@_CURVES
def test_divisor_and_bound_are_the_closed_forms(curves, choices):
  plan = curves.plan(0.5, H, D)
  sizes = choices.group_sizes()
  a, q = np.array(plan.group_scales), np.array(plan.group_rates)
  private = [g.is_private for g in plan.assignment.groups]
  z = max(r * s for r, s, p in zip(plan.noise_multipliers, a, private) if p)
  # S / F: the draw's std over the mean's denominator sum_j a_j q_j N_j.
  released, _ = planner.noise_divisors(plan)
  assert released == pytest.approx(np.sum(a * q * sizes) / z, rel=1e-12)
  # The budget of private clients a round is individualized sampling's.
  assert np.sum((q * sizes)[:3]) == pytest.approx(curves.budget, rel=1e-3)
  shares = a * q * sizes / np.sum(a * q * sizes)
  point = [p for p in plan.frontier if p.tilt == 0.5][0]
  assert point.divisor == pytest.approx(released, rel=0.01)
  exact = frontier._point(0.5, q, [z / s if p else None for s, p in
                                   zip(a, private)],
                          q_star_weights(curves, 0.5), sizes, H, D)
  for k, w in enumerate(exact.shares):
    want = H * ((1 - w)**2 + sum(v * v for i, v in enumerate(exact.shares)
                                 if i != k)) + D / released**2
    assert exact.bounds[k] == pytest.approx(want, rel=1e-9)


def q_star_weights(curves, tilt):
  return [q**tilt for q in curves.base_rates]


@_CURVES
def test_frontier_runs_from_unbiased_to_least_noise(curves):
  points = curves.points(H, D)
  assert [p.tilt for p in points] == list(frontier.TILTS)
  divisors = [p.divisor for p in points]
  assert divisors[0] < divisors[-1]
  assert max(divisors) == pytest.approx(divisors[-1], rel=0.02)
  # No spread between the groups: the bound is the noise alone.
  assert curves.default_tilt(1e-9, D) == max(
      frontier.TILTS, key=lambda t: curves.point(t).divisor)


def test_with_equal_groups_and_much_spread_the_unbiased_end_wins():
  """Thirds without opt-out: every group's pull (1 - W_k)^2 +
  sum_{j != k} W_j^2 is least at equal shares, t = 0."""
  choices = pg.assign_opt_out(list(range(900)), LEVELS, 0.0, seed=0)
  curves = frontier.Frontier(plans.plan_individualized_sampling(
      choices, SAMPLING, ROUNDS, CLIP))
  assert curves.default_tilt(1e6, 1) == 0.0


def test_one_level_is_one_plan_whose_default_is_the_exact_end():
  """Every client at one level: every t weighs them alike, so the default
  is t = 1, individualized sampling's exact rate and z, whatever the
  curves' interpolation makes of the other t."""
  choices = pg.assign_opt_out(list(range(600)), LEVELS[2:], 0.0, seed=0)
  individualized = plans.plan_individualized_sampling(choices, SAMPLING,
                                                      ROUNDS, CLIP)
  for spread in (1e-9, 1.0, 1e6):
    plan = frontier.plan_frontier(choices, SAMPLING, ROUNDS, CLIP, None,
                                  spread, D)
    assert plan.tilt == 1.0
    np.testing.assert_allclose(plan.group_rates, individualized.group_rates,
                               rtol=1e-12)
    np.testing.assert_allclose(plan.noise_multipliers,
                               individualized.noise_multipliers, rtol=1e-12)


def test_default_tilt_is_the_least_worst_bound(choices):
  plan = frontier.plan_frontier(choices, SAMPLING, ROUNDS, CLIP, None, H, D)
  best = min(p.worst_bound for p in plan.frontier)
  chosen = [p for p in plan.frontier if p.tilt == plan.tilt][0]
  assert chosen.worst_bound == best


@pytest.mark.parametrize('tilt', [1.5, -0.1, math.nan])
def test_bad_tilt_is_refused(choices, tilt):
  with pytest.raises(ValueError, match='tilt t must be in'):
    frontier.plan_frontier(choices, SAMPLING, ROUNDS, CLIP, tilt, H, D)


def test_fixed_sampling_is_refused(choices):
  with pytest.raises(ValueError, match='Poisson'):
    frontier.plan_frontier(
        choices, accounting.FixedSizeSampling(1200, 60), ROUNDS, CLIP, 0.5)

"""Individualized sampling's plan: one noise multiplier z, each private
group at the largest Poisson rate that keeps it within its target, checked
against dp_accounting composing each group's rounds from scratch; the
private groups' expected count per round is the one-rate plan's."""

import math

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest

from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import selection

LEVELS = [pg.PrivacyGroup('eps1', 1.0, 1e-4),
          pg.PrivacyGroup('eps3.6', 3.6, 1e-4),
          pg.PrivacyGroup('eps10', 10.0, 1e-4)]
ROUNDS, Q, Z_B = 500, 0.05, 5.0
# The tests that read the module's `plan`: one xdist worker plans it.
_PLAN = pytest.mark.xdist_group('test_individualized_sampling_plan')


def dp_accounting_epsilon(z, z_b, q, rounds, delta):
  """Epsilon of `rounds` Poisson(q)-sampled rounds of the sum (noise z) and
  the centred clip count (noise z_b, sensitivity 1/2), composed by
  dp_accounting's RDP accountant from scratch."""
  z_eff = (z**-2 + (2 * z_b)**-2)**-0.5
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          q, dp_accounting.GaussianDpEvent(z_eff)), rounds))
  return accountant.get_epsilon(delta)


@pytest.fixture(scope='module')
def plan():
  choices = pg.assign_opt_out(list(range(2000)), LEVELS, 0.05, seed=0)
  return plans.plan_individualized_sampling(
      choices, accounting.PoissonSampling(Q), ROUNDS,
      plans.ClipSettings(count_stddev=Z_B))


@_PLAN
def test_each_group_spends_its_target_at_its_rate_by_dp_accounting(plan):
  groups = plan.assignment.groups
  z = plan.noise_multipliers[0]
  assert plan.noise_multipliers == (z, z, z, 0.0)
  rates = plan.group_rates
  for j, g in enumerate(groups[:3]):
    want = dp_accounting_epsilon(z, Z_B, rates[j], ROUNDS, g.delta)
    # What the ledger prints (rounds.csv, summary) is dp_accounting's.
    assert plan.ledger.epsilon(j, ROUNDS) == pytest.approx(want, rel=1e-9)
    assert want <= g.epsilon * (1 + 1e-9)
    # The largest such rate: a little more spends more than the target.
    assert want == pytest.approx(g.epsilon, rel=1e-6)
    assert dp_accounting_epsilon(z, Z_B, rates[j] * (1 + 1e-5), ROUNDS,
                                  g.delta) > g.epsilon
  assert plan.ledger.first_exceeded(ROUNDS) is None
  assert rates[0] < Q < rates[2] and rates[3] == Q  # opt-out at the run's q
  assert math.isinf(plan.ledger.epsilon(3, ROUNDS))


@_PLAN
def test_the_private_clients_per_round_are_the_one_rate_plans(plan):
  sizes = plan.assignment.group_sizes()
  private = sum(q * n for q, n in zip(plan.group_rates[:3], sizes[:3]))
  assert private == pytest.approx(Q * sizes[:3].sum(), rel=1e-6)
  assert plan.expected_group_sizes[:3] == pytest.approx(
      [q * n for q, n in zip(plan.group_rates[:3], sizes[:3])])
  assert plan.expected_clients_per_round == pytest.approx(Q * sizes.sum(),
                                                          rel=1e-6)


@_PLAN
def test_z_lies_between_the_one_rate_plans_extremes(plan):
  """At one rate the strictest group needs the most noise and the loosest
  the least; the shared z lies between."""
  one_rate = plans.plan_privacy(plan.assignment, accounting.PoissonSampling(Q),
                                ROUNDS, plans.ClipSettings(count_stddev=Z_B))
  z = plan.noise_multipliers[0]
  assert one_rate.noise_multipliers[2] < z < one_rate.noise_multipliers[0]


def test_one_private_level_is_the_one_rate_plan():
  choices = pg.assign_opt_out(list(range(400)), LEVELS[1:2], 0.1, seed=0)
  clip = plans.ClipSettings(count_stddev=Z_B)
  individual = plans.plan_individualized_sampling(
      choices, accounting.PoissonSampling(Q), 100, clip)
  one_rate = plans.plan_privacy(choices, accounting.PoissonSampling(Q), 100,
                                clip)
  assert individual.noise_multipliers == one_rate.noise_multipliers
  assert individual.group_rates[0] == pytest.approx(Q, rel=1e-6)
  assert individual.group_rates[0] <= Q * (1 + 1e-9)


@pytest.mark.parametrize('sampling,denominator,match', [
    (accounting.FixedSizeSampling(400, 20), 'expected', 'sampling=poisson'),
    (accounting.PoissonSampling(Q), 'realized', 'denominator=expected'),
])
def test_what_individualized_sampling_cannot_run_is_refused(
    sampling, denominator, match):
  choices = pg.assign_opt_out(list(range(400)), LEVELS, 0.1, seed=0)
  with pytest.raises(ValueError, match=match):
    plans.plan_individualized_sampling(
        choices, sampling, 100, plans.ClipSettings(count_stddev=Z_B),
        denominator)


def test_each_client_is_sampled_at_its_groups_rate():
  """`selection.sample_clients` with per-client rates: over many rounds
  each group's members join at its rate, and at one rate for everyone the
  draw is the plain Poisson one (FedHDP's rounds do not change)."""
  ids = list(range(300))
  rates = np.repeat([0.02, 0.1, 0.5], 100)
  joined = np.zeros(300)
  for t in range(400):
    joined[selection.sample_clients(ids, accounting.PoissonSampling(0.1), 5,
                                    t, rates)] += 1
  for k, q in enumerate((0.02, 0.1, 0.5)):
    mean = joined[100 * k:100 * (k + 1)].mean() / 400
    assert mean == pytest.approx(q, abs=4 * math.sqrt(q * (1 - q) / 40000))
  same = np.full(300, 0.1)
  assert selection.sample_clients(ids, accounting.PoissonSampling(0.1), 5, 3,
                                  same) == selection.sample_clients(
                                      ids, accounting.PoissonSampling(0.1), 5,
                                      3)


def test_a_rate_search_through_tiny_rates_plans():
  """eps 10 at delta 1e-2 over 2 rounds: the rate search passes rates at
  which dp_accounting's RDP rounds to -1e-16, which its get_epsilon
  refuses; the plan is made and each group stays within its target."""
  levels = [pg.PrivacyGroup('eps1', 1.0, 1e-2),
            pg.PrivacyGroup('eps4', 4.0, 1e-2),
            pg.PrivacyGroup('eps10', 10.0, 1e-2)]
  choices = pg.assign_opt_out(list(range(100)), levels, 0.0, seed=0)
  plan = plans.plan_individualized_sampling(
      choices, accounting.PoissonSampling(0.2), 2,
      plans.ClipSettings(count_stddev=5.0))
  z = plan.noise_multipliers[0]
  for j, g in enumerate(levels):
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            plan.group_rates[j], dp_accounting.GaussianDpEvent(
                (z**-2 + 10.0**-2)**-0.5)), 2))
    assert accountant.get_epsilon(g.delta) <= g.epsilon * (1 + 1e-9)

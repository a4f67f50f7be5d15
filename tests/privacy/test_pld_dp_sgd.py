"""PLD accounting of DP-SGD (the untrusted setting's clients, the cross-silo
setting's silos) against independent computations.

Every epsilon a plan prints must lie between a lower bound on the exact one
(dp_accounting's optimistic PLD at half the discretization) and RDP's
bound for the same noise, and be what dp_accounting's `PLDAccountant`
reports at the plan's discretization. Calibration must meet its target from
below, and not with 1e-4 less noise.
"""

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from dp_accounting import rdp
from dp_accounting.pld import privacy_loss_distribution

from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans


def _event(z, q, steps):
  return dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)),
      steps)


def _pld_accountant(z, q, steps, delta, discretization):
  accountant = pld.PLDAccountant(
      value_discretization_interval=discretization)
  accountant.compose(_event(z, q, steps))
  return accountant.get_epsilon(delta)


def _rdp_accountant(z, q, steps, delta):
  accountant = rdp.RdpAccountant()
  accountant.compose(_event(z, q, steps))
  return accountant.get_epsilon(delta)


def _lower_bound(z, q, steps, delta, discretization):
  """dp_accounting's optimistic privacy buckets (losses rounded down): no
  mechanism of these parameters has a smaller epsilon."""
  one = privacy_loss_distribution.from_gaussian_mechanism(
      z, sampling_prob=q, value_discretization_interval=discretization,
      pessimistic_estimate=False, use_connect_dots=False)
  return one.self_compose(steps).get_epsilon_for_delta(delta)


# (epsilon, delta, examples, batch size, rounds, epochs a round): a School
# silo, a Ditto silo (two epochs), a silo smaller than its batch (q = 1), a
# Robust-HDP client (eps 1 over 2,400 examples at batch 16: 1e-3 is loose).
CASES = [(6.0, 1e-3, 100, 32, 20, 1), (6.0, 1e-3, 150, 32, 10, 2),
         (4.0, 1e-3, 30, 30, 10, 1), (1.0, 1e-4, 2400, 16, 2, 1),
         (2.0, 1e-5, 600, 64, 8, 1)]


@pytest.mark.parametrize('eps,delta,n,b,rounds,epochs', CASES)
def test_printed_epsilon_lies_between_a_lower_bound_and_rdps(
    eps, delta, n, b, rounds, epochs):
  plan = plans.plan_client_privacy(eps, delta, n, b, rounds, epochs,
                                   accountant=accounting.PLD,
                                   finer_if_loose=True)
  assert plan.accountant.name == 'pld'
  d = plan.accountant.discretization
  z, q = plan.noise_multiplier, plan.sampling_rate
  for r in (1, rounds):
    steps = r * plan.steps_per_round
    printed = plan.epsilon_after(r)
    assert printed == pytest.approx(_pld_accountant(z, q, steps, delta, d),
                                    rel=1e-9)
    assert _lower_bound(z, q, steps, delta, d / 2) <= printed
    rdp_eps = _rdp_accountant(z, q, steps, delta)
    assert printed <= rdp_eps
    assert plan.rdp_epsilon_after(r) == pytest.approx(rdp_eps, rel=1e-9)
  assert plan.epsilon_after(rounds) <= eps


def test_calibration_meets_its_target_from_below_on_random_settings():
  """100 random (q, steps, eps, delta), few steps and the coarsest
  discretization the tolerance accepts (1e-2, refined where a bound needs
  it; the search is the same at any) so that it stays fast: each z meets
  its target as dp_accounting's PLDAccountant reads it at the
  discretization the calibration chose, and 1e-4 less noise would not."""
  rng = np.random.default_rng(0)
  shortfall, refined = [], 0
  coarsest = accounting.Accountant('pld', accounting.MAX_PLD_DISCRETIZATION)
  for i in range(100):
    q = 1.0 if i % 10 == 0 else float(10**rng.uniform(-1.7, -0.1))
    steps = int(10**rng.uniform(1, 2.5))
    eps = float(10**rng.uniform(-0.5, 0.8))
    delta = float(10**rng.uniform(-7, -3))
    z, used = accounting.calibrate_pld(eps, delta, q, steps,
                                              coarsest, True)
    refined += used.discretization < coarsest.discretization
    d = used.discretization
    spent = _pld_accountant(z, q, steps, delta, d)
    assert spent <= eps, (q, steps, eps, delta, z, spent)
    assert _pld_accountant(z * (1 - 1e-4), q, steps, delta, d) > eps, (
        q, steps, eps, delta, z)
    shortfall.append((eps - spent) / eps)
  print(f'worst shortfall below target: {max(shortfall):.2e} of the target; '
        f'{refined} of 100 at a finer discretization than 1e-2')
  assert max(shortfall) < 1e-4


def test_a_stated_discretization_too_loose_is_refused_and_none_refines():
  """eps 1 over 150 steps a round at q = 1/150, 30 rounds: at 1e-3 the
  bound may be 1.7% loose."""
  args = ([1.0], 1e-4, [2400], [16], 30)
  with pytest.raises(accounting.LoosePldError,
                     match='--pld_discretization=0.0001'):
    plans.plan_clients(*args, accountant='pld', pld_discretization=1e-3)
  (plan,) = plans.plan_clients(*args, accountant='pld')
  assert plan.accountant.discretization == pytest.approx(1e-4)
  assert accounting.pld_looseness(
      plan.noise_multiplier, plan.sampling_rate, 30 * 150, 1e-4,
      1e-4) <= accounting.PLD_TOLERANCE


def test_a_stored_noise_multiplier_is_confirmed_only_if_calibrated():
  z, used = accounting.calibrate_pld(6.0, 1e-3, 0.2, 500,
                                            accounting.PLD)
  holds = accounting.dp_sgd_pld_holds
  assert holds(z, 6.0, 1e-3, 0.2, 500, accounting.PLD) == used
  for other in (z * (1 - 1e-3), z * (1 + 1e-3)):  # over, or more noise
    assert holds(other, 6.0, 1e-3, 0.2, 500, accounting.PLD) is None
  known = plans.plan_client_privacy(6.0, 1e-3, 160, 32, 100,
                                    known_noise_multiplier=z * 1.01,
                                    accountant=accounting.PLD)
  assert known.noise_multiplier == pytest.approx(z, rel=1e-4)


def test_confirming_a_stored_noise_multiplier_costs_the_printed_pld_only():
  """A stored z is confirmed by one PLD, the one the summary prints (its
  epsilon is then a cache hit), and the z meets the target there."""
  fresh = plans.plan_client_privacy(6.0, 1e-3, 150, 32, 50,
                                    accountant=accounting.PLD)
  plans.plan_client_privacy.cache_clear()
  accounting.pld_epsilon.cache_clear()
  known = plans.plan_client_privacy(
      6.0, 1e-3, 150, 32, 50, known_noise_multiplier=fresh.noise_multiplier,
      accountant=accounting.PLD)
  assert known.noise_multiplier == fresh.noise_multiplier
  assert accounting.pld_epsilon.cache_info().misses == 1
  assert known.epsilon_after(50) <= 6.0
  assert accounting.pld_epsilon.cache_info().misses == 1


def test_private_selections_keep_rdp_which_composes_them():
  plan = plans.plan_client_privacy(4.0, 1e-3, 100, 32, 10,
                                   selection_epsilon=0.1, selection_rounds=2,
                                   accountant=accounting.PLD)
  assert plan.accountant == accounting.RDP
  assert plan.rdp_epsilon_after(10) is None


def test_pld_needs_less_noise_than_rdp_at_schools_silos():
  """eps 6, delta 1e-3, 200 rounds at batch 32: a silo of 100 and one of
  200 examples, as School's."""
  for n in (100, 200):
    with_pld = plans.plan_client_privacy(6.0, 1e-3, n, 32, 200,
                                         accountant=accounting.PLD)
    with_rdp = plans.plan_client_privacy(6.0, 1e-3, n, 32, 200)
    assert 0.05 < 1 - with_pld.noise_multiplier / with_rdp.noise_multiplier
    assert with_pld.epsilon_after(200) <= 6.0

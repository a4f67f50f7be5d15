"""PLD accounting (`--accountant=pld`) against independent computations.

Every printed PLD epsilon must be an upper bound: it is checked against the
exact epsilon of one round (the subsampled Gaussian's hockey-stick
divergence integrated numerically here) and against lower bounds for many
rounds (dp_accounting's optimistic privacy buckets at a finer
discretization), and it must sit at or below RDP's. Calibration must meet
its target from below, as dp_accounting's own PLD accountant reads it.
"""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from dp_accounting.pld import privacy_loss_distribution
from scipy import integrate
from scipy import optimize

from tff_hdp.privacy import accounting

PLD = accounting.PLD


def _normal_pdf(x, mean, z):
  """N(mean, z^2)'s density at a scalar: scipy.stats.norm.pdf's formula
  without its per-call argument checks, which cost a hundred times the
  arithmetic (about 60,000 calls per epsilon)."""
  return math.exp(-0.5 * ((x - mean) / z)**2) / (z * math.sqrt(2 * math.pi))


def _exact_one_round_epsilon(z, q, delta):
  """epsilon(delta) of one Poisson(q)-sampled Gaussian (sensitivity 1, noise
  z) under add/remove: the larger of the two orders' hockey-stick
  divergences, each integrated over the output line, solved for epsilon."""
  mixture = lambda x: (1 - q) * _normal_pdf(x, 0, z) + q * _normal_pdf(x, 1, z)
  base = lambda x: _normal_pdf(x, 0, z)

  def hockey(eps, p, r):
    f = lambda x: max(0.0, p(x) - math.exp(eps) * r(x))
    return integrate.quad(f, -40 * z, 1 + 40 * z, limit=500,
                          points=[0.0, 0.5, 1.0], epsabs=1e-14)[0]

  def eps_for(p, r):
    if hockey(0.0, p, r) <= delta:
      return 0.0
    return optimize.brentq(lambda e: hockey(e, p, r) - delta, 0.0, 50.0,
                           xtol=1e-10)

  return max(eps_for(mixture, base), eps_for(base, mixture))


def _lower_bound(z, q, rounds, delta, discretization=1e-4):
  """An epsilon no mechanism of these parameters falls below:
  dp_accounting's optimistic privacy buckets (rounding the losses down)."""
  one = privacy_loss_distribution.from_gaussian_mechanism(
      z, sampling_prob=q, value_discretization_interval=discretization,
      pessimistic_estimate=False, use_connect_dots=False)
  return one.self_compose(rounds).get_epsilon_for_delta(delta)


def _dp_accounting(accountant, z, q, rounds, delta):
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)),
      rounds))
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize('z,q,delta', [(1.0, 0.05, 1e-4), (0.6, 0.2, 1e-5),
                                       (3.0, 0.01, 1e-6)])
def test_one_rounds_pld_epsilon_bounds_the_exact_one_tightly(z, q, delta):
  exact = _exact_one_round_epsilon(z, q, delta)
  ours = accounting.epsilon_spent(z, None, accounting.PoissonSampling(q, PLD),
                                  1, delta)
  assert exact <= ours <= exact * 1.01 + 1e-3


@pytest.mark.parametrize('z,z_b,q,rounds,delta', [
    (1.0, None, 0.05, 500, 1e-4),
    (1.1, 0.5, 0.05, 500, 1e-4),
    (0.8, 2.0, 0.01, 200, 1e-5),
    (3.0, 10.0, 0.3, 50, 1e-3),
])
def test_pld_epsilon_sits_between_a_lower_bound_and_rdps(z, z_b, q, rounds,
                                                         delta):
  ours = accounting.epsilon_spent(z, z_b, accounting.PoissonSampling(q, PLD),
                                  rounds, delta)
  z_eff = z if z_b is None else 1.0 / math.sqrt(z**-2 + (2 * z_b)**-2)
  assert _lower_bound(z_eff, q, rounds, delta) <= ours
  assert ours <= _dp_accounting(dp_accounting.rdp.RdpAccountant(), z_eff, q,
                                rounds, delta)
  # dp_accounting's own PLD accountant, at the discretization stated.
  assert ours == pytest.approx(_dp_accounting(
      pld.PLDAccountant(value_discretization_interval=1e-3), z_eff, q, rounds,
      delta), rel=1e-9)


@pytest.mark.parametrize('z,q,rounds,delta', [
    (1.0, 0.05, 500, 1e-4), (0.8, 0.01, 2000, 1e-5), (4.0, 0.02, 10, 1e-6),
    (10.0, 0.01, 100, 1e-5), (20.0, 0.05, 10, 1e-4)])
@pytest.mark.parametrize('discretization', [1e-2, 3e-3, 1e-3])
def test_a_looseness_within_tolerance_overstates_the_error(
    z, q, rounds, delta, discretization):
  """Where `pld_looseness` passes the tolerance, the bound is within it of
  the one at 1e-4 (itself an upper bound, so the error is at most that)."""
  loose = accounting.pld_looseness(z, q, rounds, delta, discretization)
  if loose <= accounting.PLD_TOLERANCE:
    coarse = accounting.pld_epsilon(z, q, rounds, delta, discretization)
    fine = accounting.pld_epsilon(z, q, rounds, delta, 1e-4)
    assert coarse <= fine * (1 + loose) + 1e-12


def test_a_calibration_looser_than_the_tolerance_is_refused():
  """eps 0.03 over 100 rounds at q = 0.01: at 1e-3 the bound is ~8% loose."""
  sampling = accounting.PoissonSampling(0.01, accounting.Accountant('pld',
                                                                    1e-3))
  with pytest.raises(accounting.LoosePldError, match='--pld_discretization'):
    accounting.calibrate_noise_multiplier(0.03, 1e-5, sampling, 100, None)


def test_calibration_meets_its_target_from_below_on_random_settings():
  """100 random (q, T, eps, delta), at the coarsest discretization the
  tolerance accepts (the search is the same at any): each z meets its
  target as dp_accounting's PLD accountant reads it, and 1e-5 less noise
  would not."""
  rng = np.random.default_rng(0)
  excess, refused = [], 0
  for _ in range(100):
    q = float(10 ** rng.uniform(-3, -0.3))
    rounds = int(10 ** rng.uniform(0, 3.3))
    eps = float(10 ** rng.uniform(-0.5, 1.2))
    delta = float(10 ** rng.uniform(-7, -3))
    for d in (accounting.MAX_PLD_DISCRETIZATION, 3e-3, 1e-3, 1e-4):
      sampling = accounting.PoissonSampling(q, accounting.Accountant('pld', d))
      try:
        z = accounting.calibrate_noise_multiplier(eps, delta, sampling,
                                                  rounds, None)
        break
      except accounting.LoosePldError:  # the finer one it names, as a user
        refused += 1
    spent = _dp_accounting(pld.PLDAccountant(value_discretization_interval=d),
                           z, q, rounds, delta)
    assert spent <= eps, (q, rounds, eps, delta, z, spent)
    less = accounting.epsilon_spent(z * (1 - 1e-5), None, sampling, rounds,
                                    delta)
    assert less > eps, (q, rounds, eps, delta, z)
    excess.append((eps - spent) / eps)
  print(f'worst shortfall below target: {max(excess):.2e} of the target; '
        f'{refused} discretizations refused as too loose')


@pytest.mark.parametrize('eps,rdp_saving', [(1.0, 0.091), (3.6, 0.068),
                                            (10.0, 0.052)])
def test_feo2_mnist_targets_need_less_noise_than_rdp(eps, rdp_saving):
  """q = 0.05, 500 rounds, delta 1e-4: PLD's z is 5-9% below RDP's."""
  pld_z = accounting.calibrate_noise_multiplier(
      eps, 1e-4, accounting.PoissonSampling(0.05, PLD), 500, None)
  rdp_z = accounting.calibrate_noise_multiplier(
      eps, 1e-4, accounting.PoissonSampling(0.05), 500, None)
  assert 1 - pld_z / rdp_z == pytest.approx(rdp_saving, abs=0.002)


def test_sampling_rate_calibration_meets_its_target():
  for eps in (1.0, 3.6, 10.0):
    q = accounting.calibrate_sampling_rate(eps, 1e-4, 1.2, None, 500, PLD)
    spent = _dp_accounting(pld.PLDAccountant(value_discretization_interval=1e-3),
                           1.2, q, 500, 1e-4)
    assert spent <= eps
    assert accounting.pld_epsilon(1.2, min(1.0, q * (1 + 1e-5)), 500, 1e-4,
                                  1e-3) > eps
    assert q >= accounting.calibrate_sampling_rate(eps, 1e-4, 1.2, None, 500)


def test_ledger_names_its_accountant_and_gives_rdps_beside():
  budgets = [accounting.GroupBudget('a', 1.0, 5.0, 1e-4), None]
  ledger = accounting.PrivacyLedger(
      budgets, accounting.PoissonSampling(0.05, PLD), None)
  assert [ledger.accountant(j) for j in range(2)] == ['pld', None]
  assert ledger.rdp_epsilon(0, 100) == pytest.approx(_dp_accounting(
      dp_accounting.rdp.RdpAccountant(), 1.0, 0.05, 100, 1e-4), abs=1e-9)
  assert ledger.epsilon(0, 100) < ledger.rdp_epsilon(0, 100)


@pytest.mark.parametrize('name,discretization', [('moments', 1e-3),
                                                 ('pld', 0.05), ('pld', 0.0),
                                                 ('pld', math.nan)])
def test_an_unknown_accountant_or_a_loose_discretization_is_refused(
    name, discretization):
  with pytest.raises(ValueError, match='accountant|discretization'):
    accounting.Accountant(name, discretization)

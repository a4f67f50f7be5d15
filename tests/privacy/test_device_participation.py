"""Accounting without sampling, as a run's ledger does it, against
independent oracles: every participation pattern of the dense strategy
matrix, and the Gaussian mechanism's exact privacy curve (Balle and Wang
2018), solved here with scipy."""

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats

from tests.privacy import strategy_oracles as oracles
from tff_hdp.privacy import accounting
from tff_hdp.privacy import blt
from tff_hdp.privacy import min_separation as ms

ROUNDS, B, K = 8, 2, 3


def _oracle_epsilon(sensitivity_squared, noise_multiplier, delta,
                    count_mu2=0.0):
  """The least epsilon with delta(epsilon) <= delta for a Gaussian
  mechanism of mu = sqrt(sens^2 / z^2 + count_mu2)."""
  mu = math.sqrt(sensitivity_squared / noise_multiplier ** 2 + count_mu2)

  def excess(eps):
    return (stats.norm.cdf(-eps / mu + mu / 2) -
            math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta)

  if excess(0.0) <= 0:
    return 0.0
  return optimize.brentq(excess, 0.0, 100.0, xtol=1e-13, rtol=1e-13)


def _strategies():
  c = blt.BltParameters((0.8, 0.3), (0.4, 0.2)).coefficients(ROUNDS)
  return [
      (ms.IndependentNoise(), lambda t: np.eye(t)),
      (ms.TreeNoise(), oracles.tree_strategy_matrix),
      (ms.ToeplitzNoise(tuple(c)), lambda t: oracles.toeplitz_matrix(c[:t])),
  ]


@pytest.mark.parametrize('noise,matrix', _strategies(),
                         ids=['independent', 'tree', 'blt'])
def test_every_rounds_epsilon_equals_the_oracles(noise, matrix):
  participation = ms.DeviceParticipation(100, 10, B, K, noise)
  z, delta = 1.7, 1e-5
  for t in range(1, ROUNDS + 1):
    sensitivity2 = oracles.brute_force_sensitivity_squared(
        matrix(t), ms.MinSeparation(t, B, K))
    assert participation.epsilon_spent(z, None, t, delta) == pytest.approx(
        _oracle_epsilon(sensitivity2, z, delta), abs=1e-6), t
  assert participation.epsilon_spent(z, None, 0, delta) == 0.0


@pytest.mark.parametrize('noise,matrix', _strategies(),
                         ids=['independent', 'tree', 'blt'])
def test_two_groups_get_their_targets_through_the_accountant(noise, matrix):
  """eps 1 and eps 8, each calibrated by `accounting` (which hands the
  participation its own accounting) and each equal to the oracle's at the
  calibrated z, with the clip count's answers composed."""
  participation = ms.DeviceParticipation(100, 10, B, K, noise)
  sensitivity2 = oracles.brute_force_sensitivity_squared(
      matrix(ROUNDS), ms.MinSeparation(ROUNDS, B, K))
  count_stddev = 20.0
  count_mu2 = K / (2 * count_stddev) ** 2  # K answers of sensitivity 1/2
  for target in (1.0, 8.0):
    z = accounting.calibrate_noise_multiplier(target, 1e-6, participation,
                                              ROUNDS, count_stddev)
    assert _oracle_epsilon(sensitivity2, z, 1e-6, count_mu2) == pytest.approx(
        target, abs=1e-6)
    assert accounting.epsilon_spent(z, count_stddev, participation, ROUNDS,
                                    1e-6) == pytest.approx(target, abs=1e-6)


def test_the_ledger_accounts_the_group_and_refuses_past_the_target():
  participation = ms.DeviceParticipation(100, 10, B, K, ms.TreeNoise())
  z = accounting.calibrate_noise_multiplier(2.0, 1e-6, participation,
                                            ROUNDS, None)
  ledger = accounting.PrivacyLedger(
      [accounting.GroupBudget('g', z, 2.0, 1e-6)], participation, None)
  spent = [ledger.epsilon(0, t) for t in range(1, ROUNDS + 1)]
  assert spent == sorted(spent) and spent[-1] == pytest.approx(2.0, abs=1e-6)
  assert ledger.first_exceeded(ROUNDS) is None
  # One more round than planned lets a device take part once more.
  longer = ms.DeviceParticipation(100, 10, B, K + 1, ms.TreeNoise())
  over = accounting.PrivacyLedger(
      [accounting.GroupBudget('g', z, 2.0, 1e-6)], longer, None)
  assert over.first_exceeded(ROUNDS) is not None


def test_no_other_event_composes_with_it_and_bad_settings_are_refused():
  participation = ms.DeviceParticipation(100, 10, B, K)
  with pytest.raises(ValueError, match='composes no other event'):
    accounting.epsilon_spent(1.0, None, participation, 3, 1e-6,
                             accounting.exponential_mechanism_event(1.0))
  with pytest.raises(ValueError, match='clients per round'):
    ms.DeviceParticipation(10, 11, B, K)
  with pytest.raises(ValueError, match='min_separation'):
    ms.DeviceParticipation(10, 5, 0, K)
  assert participation.rate == 0.1

"""The distributed discrete Gaussian's epsilon against independent
computations: dp_accounting's RDP accountant for the Gaussian whose zCDP
bound the sum's dominates (tau ~ 0), the exact continuous Gaussian at the
inflated sensitivity (a lower reference the bound must not undercut),
Kairouz et al.'s tau written out, and the dropout case."""

import math

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest

from tff_hdp.privacy import distributed_noise as dn
from tff_hdp.privacy import min_separation as ms

# One of TFF's builds (20 clients, 16 bits, clip 0.5, z = 1, 1000 -> 1024
# parameters): its scaled inflated L2 bound and scaled local std.
BUILD = dict(population=200, clients_per_round=20, min_separation=5,
             max_participations=4, noise_multiplier=1.0,
             sensitivity=7174.298, local_stddev=1597.0343, dim=1024)


def _gaussian_rdp_epsilon(z, count, delta):
  accountant = rdp.RdpAccountant(orders=dn.ORDERS)
  accountant.compose(dp_accounting.GaussianDpEvent(z), count)
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize('rounds,participations', [(20, 4), (6, 2), (1, 1)])
def test_large_shares_are_the_gaussian_at_the_inflated_sensitivity(
    rounds, participations):
  """sigma ~ 1600: tau underflows, and the bound is exactly dp_accounting's
  RDP of `participations` Gaussians of multiplier sqrt(n) sigma / Delta."""
  noise = dn.DistributedDiscreteGaussian(**BUILD)
  assert dn.sum_tau(noise.local_stddev, 20) < 1e-300
  z = math.sqrt(20) * BUILD['local_stddev'] / BUILD['sensitivity']
  got = noise.epsilon_spent(1.0, None, rounds, 1e-6)
  want = _gaussian_rdp_epsilon(z, participations, 1e-6)
  assert got == pytest.approx(want, rel=1e-9)
  # An upper bound: never below the exact continuous Gaussian's epsilon
  # (its whole privacy curve) at the inflated sensitivity.
  exact = ms.gaussian_epsilon(math.sqrt(participations) / z, 1e-6)
  assert exact < got < 1.5 * exact
  # And the inflation from rounding costs something: z is below TFF's 1.
  assert 0.99 < z < 1.0


def test_tau_is_kairouz_liu_steinkes_sum():
  sigma, n = 0.6, 5
  want = 10 * sum(math.exp(-2 * math.pi**2 * sigma**2 * k / (k + 1))
                  for k in range(1, n))
  assert dn.sum_tau(sigma, n) == pytest.approx(want, rel=1e-12)
  assert dn.sum_tau(sigma, 1) == 0.0


def test_small_shares_pay_for_their_distance_from_one_discrete_gaussian():
  """sigma = 0.6 per share: tau is no longer negligible, and the bound is
  the Gaussian's at the smaller of Proposition 14's terms, above the
  tau-free one."""
  build = dict(BUILD, sensitivity=1.0, local_stddev=0.6, dim=16)
  noise = dn.DistributedDiscreteGaussian(**build)
  tau = dn.sum_tau(0.6, 20)
  scale = 1.0 / (math.sqrt(20) * 0.6)
  orders = np.array(dn.ORDERS, float)
  want = np.minimum(orders * scale**2 / 2 + tau * 16,
                    orders * (scale + 4 * tau)**2 / 2)
  np.testing.assert_allclose(noise.round_rdp(), want, rtol=1e-12)
  free = _gaussian_rdp_epsilon(1 / scale, 4, 1e-6)
  assert noise.epsilon_spent(1.0, None, 20, 1e-6) > free


def test_dropouts_leave_fewer_shares_and_a_larger_epsilon():
  """Half the round's devices finish: 10 shares, the Gaussian at
  multiplier sqrt(10) sigma / Delta."""
  noise = dn.DistributedDiscreteGaussian(**BUILD)
  z_half = math.sqrt(10) * BUILD['local_stddev'] / BUILD['sensitivity']
  got = noise.epsilon_spent(1.0, None, 20, 1e-6, finishing=0.5)
  assert got == pytest.approx(_gaussian_rdp_epsilon(z_half, 4, 1e-6),
                              rel=1e-9)
  assert got > noise.epsilon_spent(1.0, None, 20, 1e-6)


def test_calibration_meets_the_target_and_no_less_noise_does():
  noise = dn.DistributedDiscreteGaussian(**BUILD)
  z = noise.calibrate(3.0, 1e-6, 20)
  assert noise.at(z).epsilon_spent(z, None, 20, 1e-6) <= 3.0
  lower = z * (1 - 1e-6)
  assert noise.at(lower).epsilon_spent(lower, None, 20, 1e-6) > 3.0


def test_another_multiplier_or_a_clip_count_is_refused():
  noise = dn.DistributedDiscreteGaussian(**BUILD)
  with pytest.raises(ValueError, match="not the build's"):
    noise.epsilon_spent(2.0, None, 20, 1e-6)
  with pytest.raises(ValueError, match='fixed clip'):
    noise.epsilon_spent(1.0, 0.5, 20, 1e-6)
  with pytest.raises(ValueError, match='finishing'):
    noise.epsilon_spent(1.0, None, 20, 1e-6, finishing=0.0)
  with pytest.raises(ValueError, match='std >= 1/2'):
    dn.DistributedDiscreteGaussian(**dict(BUILD, local_stddev=0.4))

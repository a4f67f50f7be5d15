"""The distributed discrete noise's epsilon against independent
computations: dp_accounting's RDP accountant for the Gaussian whose zCDP
bound the sum's dominates (tau ~ 0), the exact continuous Gaussian at the
inflated sensitivity (a lower reference the bound must not undercut),
Kairouz et al.'s tau written out, and the dropout case; Skellam's against
Agarwal, Kairouz, Liu's bound as their accounting code writes it, the
exact Renyi divergence of one coordinate, and the Gaussian it tends to."""

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


def _gaussian_rounds_epsilon(multipliers, delta):
  """dp_accounting's RDP for one Gaussian of each multiplier, composed."""
  accountant = rdp.RdpAccountant(orders=dn.ORDERS)
  for z in multipliers:
    accountant.compose(dp_accounting.GaussianDpEvent(z))
  return accountant.get_epsilon(delta)


def _patterns(rounds, separation, most):
  """Every set of rounds a device may take part in (`MinSeparation`)."""
  def grow(pattern):
    yield pattern
    if len(pattern) < most:
      start = pattern[-1] + separation if pattern else 0
      for t in range(start, rounds):
        yield from grow(pattern + (t,))
  return list(grow(()))


@pytest.mark.parametrize('worst', [(0, 5, 10, 15), (3, 4, 5, 6),
                                   (1, 9, 10, 19)])
def test_a_run_with_dropouts_is_its_worst_devices_epsilon(worst):
  """Rounds that 20, 17 or 12 of the 20 devices finished (tau ~ 0, so
  round t is the Gaussian at multiplier sqrt(c_t) sigma / Delta): the
  printed epsilon is the largest of every participation pattern's own (4
  participations, 5 apart, in 20 rounds), each composed by dp_accounting
  round by round, whether or not the rounds with fewest shares fit one
  pattern."""
  finished = [20] * 20
  for t, c in zip(worst, (12, 12, 17, 17)):
    finished[t] = c
  noise = dn.DistributedDiscreteGaussian(**BUILD).given(finished)
  printed = noise.epsilon_spent(1.0, None, 20, 1e-6)
  ratio = BUILD['local_stddev'] / BUILD['sensitivity']
  worst_pattern = max(
      _gaussian_rounds_epsilon([math.sqrt(finished[t]) * ratio
                                for t in pattern], 1e-6)
      for pattern in _patterns(20, 5, 4) if pattern)
  assert printed == pytest.approx(worst_pattern, rel=1e-9)
  assert printed > noise.at(1.0).given([20] * 20).epsilon_spent(
      1.0, None, 20, 1e-6)


def test_rounds_every_device_finished_are_the_plans():
  noise = dn.DistributedDiscreteGaussian(**BUILD)
  assert noise.given([20] * 20).epsilon_spent(1.0, None, 20, 1e-6) == (
      pytest.approx(noise.epsilon_spent(1.0, None, 20, 1e-6), rel=1e-12))
  # A round nobody finished releases nothing of anyone.
  some = [20] * 19 + [0]
  assert noise.given(some).epsilon_spent(1.0, None, 20, 1e-6) == (
      pytest.approx(noise.epsilon_spent(1.0, None, 20, 1e-6), rel=1e-12))
  # One slot: members that drop before the count is announced leave the
  # others' shares scaled to them, and the sums' noise whole.
  own = dn.DistributedDiscreteGaussian(**BUILD, members_only=True)
  assert own.given([10] * 20).epsilon_spent(1.0, None, 20, 1e-6) == (
      own.epsilon_spent(1.0, None, 20, 1e-6))
  with pytest.raises(ValueError, match='finished devices must be in'):
    noise.given([21] * 20)
  with pytest.raises(ValueError, match='2 rounds'):
    noise.given([20, 20]).epsilon_spent(1.0, None, 3, 1e-6)


def _proposition_14(orders, delta_l2, sigma, shares, dim):
  """Kairouz et al.'s bound for `shares` discrete Gaussians of std
  `sigma`, written out."""
  tau = 10 * sum(math.exp(-2 * math.pi**2 * sigma**2 * k / (k + 1))
                 for k in range(1, shares))
  d_scale = delta_l2 / (math.sqrt(shares) * sigma)
  a = np.asarray(orders, float)
  return np.minimum(a * d_scale**2 / 2 + tau * dim,
                    a * (d_scale + math.sqrt(dim) * tau)**2 / 2)


@pytest.mark.parametrize('finishing', [1.0, 0.9, 0.5])
def test_a_groups_members_alone_are_bounded_by_the_rounds_shares(finishing):
  """One slot per device (`members_only`): c <= n members add shares of
  sigma sqrt(n / c) (n = 20, sigma = 0.6: tau matters), and at least
  ceil(f c) of them finish. Each such sum's Proposition 14, written out,
  is within the bound the run prints for f at every order; with every
  member finishing the bound is the n shares' own."""
  build = dict(BUILD, sensitivity=1.0, local_stddev=0.6, dim=16)
  noise = dn.DistributedDiscreteGaussian(**build, members_only=True)
  printed = noise.round_rdp(finishing)
  for c in range(1, 21):
    sigma = 0.6 * math.sqrt(20 / c)
    for shares in range(math.ceil(finishing * c - 1e-9), c + 1):
      got = _proposition_14(dn.ORDERS, 1.0, sigma, shares, 16)
      assert np.all(got <= printed * (1 + 1e-12)), (c, shares)
  if finishing == 1.0:
    np.testing.assert_allclose(
        printed, _proposition_14(dn.ORDERS, 1.0, 0.6, 20, 16), rtol=1e-12)


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


# A Skellam build of the size of TFF's above (1000 parameters): the scaled
# inflated L2 bound, TFF's L1 bound from it, ceil(Delta sqrt(d)), the local
# std.
SKELLAM = dict(BUILD, sensitivity=7174.0, l1_sensitivity=226862.0,
               local_stddev=1597.0, dim=1000)


def _skellam_rdp_as_agarwal_et_al_write_it(order, l1, l2, central_var, s):
  """Their accounting code's form: sensitivities and variance before the
  scale s (each divided by s, the variance by s^2)."""
  a, mu = order, central_var
  return a / (2 * mu) * l2**2 + min(
      ((2 * a - 1) * s * l2**2 + 6 * l1) / (4 * s**3 * mu**2),
      3 * l1 / (2 * s * mu))


@pytest.mark.parametrize('finishing', [1.0, 0.5])
def test_skellams_epsilon_is_agarwal_kairouz_lius_bound(finishing):
  """The epsilon is their Theorem 3.5 written in the unscaled domain (any
  scale s gives the same bound), n f shares composed over the device's
  4 participations and converted by dp_accounting."""
  noise = dn.DistributedSkellam(**SKELLAM)
  s = 1234.5
  shares = int(20 * finishing)
  rdp_curve = [4 * _skellam_rdp_as_agarwal_et_al_write_it(
      a, SKELLAM['l1_sensitivity'] / s, SKELLAM['sensitivity'] / s,
      shares * (SKELLAM['local_stddev'] / s)**2, s) for a in dn.ORDERS]
  want = rdp.compute_epsilon(dn.ORDERS, rdp_curve, 1e-6)[0]
  got = noise.epsilon_spent(1.0, None, 20, 1e-6, finishing=finishing)
  assert got == pytest.approx(want, rel=1e-9)


def test_skellams_bound_is_above_its_exact_renyi_divergence():
  """One coordinate (L1 = L2 = Delta): the exact Renyi divergence between
  Skellam(V) shifted by Delta and Skellam(V), summed over its support,
  never exceeds the bound, which is within 30% of it up to order 16."""
  from scipy import special  # pylint: disable=g-import-not-at-top
  from scipy import stats  # pylint: disable=g-import-not-at-top
  variance, delta_ = 40.0, 3
  x = np.arange(-150, 151)  # the tails beyond add below 1e-40
  log_q = stats.skellam.logpmf(x, variance / 2, variance / 2)
  log_p = stats.skellam.logpmf(x - delta_, variance / 2, variance / 2)
  orders = np.array([2, 4, 8, 16])
  exact = np.array([special.logsumexp(a * log_p + (1 - a) * log_q) / (a - 1)
                    for a in orders])
  bound = dn.skellam_rdp(orders, delta_, delta_, variance)
  assert np.all(exact <= bound)
  assert np.all(bound < 1.3 * exact)


def test_skellam_at_large_shares_is_the_gaussian_at_the_inflated_sensitivity():
  """sigma ~ 1600: the correction terms vanish, and the epsilon is within
  0.1% of dp_accounting's Gaussian at multiplier sqrt(n) sigma / Delta,
  never below it."""
  noise = dn.DistributedSkellam(**SKELLAM)
  z = math.sqrt(20) * SKELLAM['local_stddev'] / SKELLAM['sensitivity']
  got = noise.epsilon_spent(1.0, None, 20, 1e-6)
  gaussian = _gaussian_rdp_epsilon(z, 4, 1e-6)
  assert gaussian <= got < 1.001 * gaussian


def test_skellam_needs_its_l1_sensitivity():
  with pytest.raises(ValueError, match='L1 sensitivity'):
    dn.DistributedSkellam(**dict(SKELLAM, l1_sensitivity=0.0))


def test_min_bits_at_tffs_wrap_probability():
  """n = 20: 2^5 >= 20 and 4^5 >= 20 k^2 (k = 3.89): 5 bits; n = 2^20:
  2^20 >= n, 4^20 >= n k^2: 20 bits; k is the normal quantile of
  1 - 1e-4 / 2 (scipy's, not the module's)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  k = stats.norm.ppf(1 - 1e-4 / 2)
  assert k == pytest.approx(3.8906, abs=1e-4)
  for n in (1, 20, 1000, 2**20):
    bits = dn.min_bits(n)
    assert 2**bits >= n and 4**bits >= n * k**2
    assert 2**(bits - 1) < n or 4**(bits - 1) < n * k**2 or bits == 1
  assert (dn.min_bits(20), dn.min_bits(2**20)) == (5, 20)

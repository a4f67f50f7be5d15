"""The numpy sum of the subsampled Gaussian's RDP series, against
dp_accounting's own, and the searches it steers, against dp_accounting's
epsilon: a steer that is off costs time, never the target."""

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest

from tff_hdp.privacy import accounting
from tff_hdp.privacy import sampled_gaussian_rdp

_ORDERS = [float(a) for a in rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS]
# dp_accounting's RDP of the Poisson-subsampled Gaussian at a list of orders.
_DP_ACCOUNTING_RDP = (
    rdp.rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian)  # pylint: disable=protected-access


@pytest.mark.parametrize('q', [1e-6, 1e-3, 0.01, 0.05, 0.3, 0.9, 1.0])
def test_the_series_is_dp_accountings_at_every_order(q):
  for z in (0.3, 0.7, 1.0, 2.5, 17.5, 300.0):
    ours = np.array([sampled_gaussian_rdp.rdp(q, z, a) for a in _ORDERS])
    theirs = _DP_ACCOUNTING_RDP(q, z, _ORDERS)
    finite = np.isfinite(theirs)
    np.testing.assert_array_equal(np.isfinite(ours), finite)
    # Float rounding only: where the RDP is ~1e-6 or less both sums lose
    # digits to cancellation (1e-12 absolute); elsewhere they agree to 1e-9.
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-9,
                               atol=1e-11, err_msg=f'q={q}, z={z}')


def _spent(z, q, rounds, count_stddev, delta):
  """dp_accounting's own accountant over all its orders, from scratch."""
  effective = accounting.effective_noise_multiplier(z, count_stddev)
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          q, dp_accounting.GaussianDpEvent(effective)), rounds))
  return accountant.get_epsilon(delta)


_SETTINGS = [  # (epsilon, delta, rounds, clip-count std, z of the rate)
    (1.0, 1e-4, 500, None, 2.0),
    (10.0, 1e-5, 100, 5.0, 2.0),
    (0.6, 1e-4, 100, None, 2.0),  # order 8 meets it only by the KL branch
    # The largest rate spends 0 (the KL branch), searched over all orders.
    (0.05, 1e-3, 10, None, 1.0),
]


@pytest.mark.parametrize('steer', [0.97, 1.03])
@pytest.mark.parametrize('eps,delta,rounds,count_stddev,rate_z', _SETTINGS)
def test_a_steer_that_is_off_still_meets_dp_accountings_target(
    monkeypatch, steer, eps, delta, rounds, count_stddev, rate_z):
  """The searches trust dp_accounting's bound, not the steer: with the
  series 3% too low (less noise looks enough) or too high, the z and the
  rate found still meet the target by dp_accounting's own epsilon, and
  with the true series they are the least that do (to the search's
  precision)."""
  true_rdp = sampled_gaussian_rdp.rdp
  monkeypatch.setattr(sampled_gaussian_rdp, 'rdp',
                      lambda q, z, a: steer * true_rdp(q, z, a))
  q = 0.03
  z = accounting.calibrate_noise_multiplier.__wrapped__(
      eps, delta, accounting.PoissonSampling(q), rounds, count_stddev)
  assert _spent(z, q, rounds, count_stddev, delta) <= eps
  rate = accounting.calibrate_sampling_rate.__wrapped__(
      eps, delta, rate_z, count_stddev, rounds)
  assert _spent(rate_z, rate, rounds, count_stddev, delta) <= eps
  monkeypatch.setattr(sampled_gaussian_rdp, 'rdp', true_rdp)
  least = accounting.calibrate_noise_multiplier.__wrapped__(
      eps, delta, accounting.PoissonSampling(q), rounds, count_stddev)
  assert _spent(least * (1 - 1e-6), q, rounds, count_stddev, delta) > eps
  assert z >= least * (1 - 1e-9)
  largest = accounting.calibrate_sampling_rate.__wrapped__(
      eps, delta, rate_z, count_stddev, rounds)
  assert _spent(rate_z, largest * (1 + 1e-5), rounds, count_stddev, delta) > eps
  assert rate <= largest * (1 + 1e-9)

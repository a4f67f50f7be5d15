"""The faster build of the subsampled Gaussian's PLD against dp_accounting's
own `from_gaussian_mechanism`: the same PMFs, bit for bit, hence the same
epsilons."""

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution

from tff_hdp.privacy import subsampled_gaussian_pld


def _dense(pmf):
  return pmf.to_dense_pmf() if hasattr(pmf, 'to_dense_pmf') else pmf


def _settings(count):
  rng = np.random.default_rng(7)
  for _ in range(count):
    z = float(np.exp(rng.uniform(np.log(0.4), np.log(20.0))))
    q = float(np.exp(rng.uniform(np.log(1e-4), np.log(0.95))))
    yield z, q, float(rng.choice([1e-2, 2e-3, 1e-3]))
  # The project's settings: FeO2 MNIST's rounds, School's silos, q = 1.
  yield 1.2147, 0.0130, 1e-3
  yield 0.8167, 0.05, 1e-3
  yield 1.05, 0.2, 1e-3
  yield 2.0, 1.0, 1e-3


@pytest.mark.parametrize('z,q,discretization', list(_settings(24)))
def test_the_pmfs_equal_dp_accountings(z, q, discretization):
  theirs = privacy_loss_distribution.from_gaussian_mechanism(
      z, sampling_prob=q, value_discretization_interval=discretization)
  ours = subsampled_gaussian_pld.from_gaussian_mechanism(z, q, discretization)
  pairs = [(theirs._pmf_remove, ours._pmf_remove)]  # pylint: disable=protected-access
  if q < 1:
    pairs.append((theirs._pmf_add, ours._pmf_add))  # pylint: disable=protected-access
  for a, b in pairs:
    a, b = _dense(a), _dense(b)
    assert a._lower_loss == b._lower_loss  # pylint: disable=protected-access
    assert a._infinity_mass == b._infinity_mass  # pylint: disable=protected-access
    np.testing.assert_array_equal(a._probs, b._probs)  # pylint: disable=protected-access
  for steps, delta in ((1, 1e-5), (50, 1e-5)):
    assert (ours.self_compose(steps).get_epsilon_for_delta(delta) ==
            theirs.self_compose(steps).get_epsilon_for_delta(delta))


def test_a_loss_beyond_the_subsampled_range_is_refused_as_dp_accounting_does():
  """ADD's privacy loss is below -log(1 - q): dp_accounting's inversion
  refuses beyond it, and so does the grid's."""
  loss = subsampled_gaussian_pld._GridGaussianPrivacyLoss(  # pylint: disable=protected-access
      1.0, sampling_prob=0.1,
      adjacency_type=subsampled_gaussian_pld._ADD)  # pylint: disable=protected-access
  beyond = -np.log(1 - 0.1) * 1.5
  with pytest.raises(ValueError):
    loss.inverse_privacy_loss(beyond)
  with pytest.raises(ValueError):
    loss._inverse(np.array([0.01, beyond]))  # pylint: disable=protected-access
  edge = -np.log(1 - 0.1)
  np.testing.assert_array_equal(
      loss._inverse(np.array([0.01, 0.0, edge])),  # pylint: disable=protected-access
      [loss.inverse_privacy_loss(0.01), loss.inverse_privacy_loss(0.0),
       loss.inverse_privacy_loss(edge)])

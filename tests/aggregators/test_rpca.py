"""Robust PCA: planted recovery, reported non-convergence, blockwise noise."""

import numpy as np
import pytest

from tff_hdp.aggregators import rpca

pytestmark = pytest.mark.tf


def _planted(p=200, n=100, rank=2, fraction=0.05, seed=0):
  rng = np.random.default_rng(seed)
  low = rng.normal(size=(p, rank)) @ rng.normal(size=(rank, n))
  sparse = np.where(rng.random((p, n)) < fraction,
                    rng.choice([-5.0, 5.0], size=(p, n)), 0.0)
  return low, sparse


@pytest.mark.parametrize('shape', [(200, 100, 2), (400, 40, 1)])
def test_recovers_a_planted_low_rank_plus_sparse_matrix(shape):
  p, n, rank = shape
  low, sparse = _planted(p, n, rank)
  result = rpca.principal_component_pursuit(low + sparse)
  assert bool(result.converged)
  assert 0 < int(result.iterations) < 1000
  rel = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)
  assert rel(result.low_rank.numpy(), low) < 1e-3
  assert rel(result.sparse.numpy(), sparse) < 1e-3


def test_iteration_cap_is_reported_as_not_converged():
  low, sparse = _planted()
  result = rpca.principal_component_pursuit(low + sparse, max_iterations=2)
  assert not bool(result.converged)
  assert int(result.iterations) == 2
  loose = rpca.principal_component_pursuit(low + sparse, tolerance=1e-2)
  assert bool(loose.converged) and int(loose.iterations) < 16


def test_blocks_are_row_weighted_averages_of_their_own_decompositions():
  rng = np.random.default_rng(3)
  m = rng.normal(size=(50, 1)) @ rng.normal(size=(1, 8)) + rng.normal(
      size=(50, 8)) * np.linspace(0.1, 1.0, 8)
  variances, converged, iterations = rpca.blocked_noise_variances(m, 20)
  # ceil(50 / 20) = 3 near-equal blocks: rows 0-16, 16-33, 33-50.
  expected = np.zeros(8)
  most = 0
  for start, stop in [(0, 16), (16, 33), (33, 50)]:
    block = rpca.principal_component_pursuit(m[start:stop])
    expected += np.sum(block.sparse.numpy()**2, axis=0)
    most = max(most, int(block.iterations))
  np.testing.assert_allclose(variances.numpy(), expected / 50, rtol=1e-9)
  assert bool(converged) and int(iterations) == most
  whole, _, _ = rpca.blocked_noise_variances(m, 50)
  single = rpca.principal_component_pursuit(m)
  np.testing.assert_allclose(whole.numpy(),
                             np.sum(single.sparse.numpy()**2, axis=0) / 50)


def test_noise_estimates_follow_the_columns_noise():
  rng = np.random.default_rng(0)
  p, n = 2000, 12
  stds = np.geomspace(0.05, 2.0, n)
  m = rng.normal(size=(p, 2)) @ rng.normal(size=(2, n)) + rng.normal(
      size=(p, n)) * stds
  variances, converged, _ = rpca.blocked_noise_variances(m, 1000)
  assert bool(converged)
  log_corr = np.corrcoef(np.log(variances.numpy()), np.log(stds**2))[0, 1]
  assert log_corr > 0.95
  assert np.all(np.diff(variances.numpy()[4:]) > 0)


def test_noise_estimates_settle_before_the_residual_test_stops():
  # Updates that are mostly DP noise of very different scales (as Robust-HDP
  # sees them): the weights 1 / sigma_hat^2 must give an aggregate as quiet
  # as the oracle's. With rho = 1.5 S froze early: estimates down to 36% of
  # the drawn variance, aggregate noise 0.8% above the oracle's.
  rng = np.random.default_rng(1)
  p, n = 20000, 20
  std = np.exp(rng.uniform(np.log(0.01), np.log(0.3), n))
  low = rng.normal(size=(p, 1)) @ rng.normal(size=(1, n)) * 0.002
  noise = rng.normal(size=(p, n)) * std
  result = rpca.principal_component_pursuit(low + noise)
  assert bool(result.converged)
  estimate = np.mean(result.sparse.numpy()**2, axis=0)
  drawn = np.mean(noise**2, axis=0)
  assert np.all(estimate / drawn > 0.85)
  def power(w):
    w = w / w.sum()
    return np.sum(w**2 * drawn)
  assert power(1 / estimate) / power(1 / drawn) < 1.003

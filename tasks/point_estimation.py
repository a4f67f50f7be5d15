"""Federated point estimation (SPEC.md §1), run through the real aggregator.

Client j holds n_s samples x = phi + p_j + v and sends its sample mean; the
private group's mean gets Gaussian noise of variance gamma^2 from
`HeterogeneousDPFactory` itself (noise multiplier z_p = N_p gamma / S, no
clipping in effect). Each coordinate of the clients' vectors is an independent
trial, so one aggregation round gives thousands of Monte Carlo trials; the
empirical server MSE is then compared with the closed form of
`tff_hdp.point_estimation_theory`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_federated as tff

from tff_hdp import point_estimation_theory as theory
from tff_hdp.aggregators.heterogeneous_dp import HeterogeneousDPFactory

# Clip norm far above any update's norm, so clipping never acts.
_NO_CLIP_NORM = 1e6


@dataclasses.dataclass(frozen=True)
class MonteCarloResult:
  ratio: float
  trials: int
  empirical_mse: float
  theoretical_variance: float

  @property
  def relative_error(self) -> float:
    return abs(self.empirical_mse / self.theoretical_variance - 1.0)


def client_estimates(setting: theory.PointEstimationSetting, trials: int,
                     rng: np.random.Generator, phi: float = 1.0) -> np.ndarray:
  """Clients' local estimates, shape [N, trials]; private clients last."""
  n = setting.num_clients
  shifts = rng.normal(0.0, np.sqrt(setting.tau2), size=(n, 1, trials))
  samples = phi + shifts + rng.normal(
      0.0, np.sqrt(setting.beta2), size=(n, setting.samples_per_client, trials))
  return samples.mean(axis=1)


def aggregate_once(setting: theory.PointEstimationSetting, ratio: float,
                   estimates: np.ndarray, seed: int) -> np.ndarray:
  """One round of the FedHDP aggregator on the clients' estimates."""
  n, trials = estimates.shape
  norms = np.linalg.norm(estimates, axis=1)
  if norms.max() >= _NO_CLIP_NORM:
    raise ValueError('estimates too large for the no-clipping regime.')
  n_np, n_p = setting.num_non_private, setting.num_private
  z_p = n_p * np.sqrt(setting.gamma2) / _NO_CLIP_NORM
  factory = HeterogeneousDPFactory(
      noise_multipliers=[0.0, z_p],
      ratios=[1.0, ratio],
      expected_group_sizes=[None, float(n_p)],
      initial_clip_norm=_NO_CLIP_NORM,
      clip_learning_rate=0.0,
      seed=seed)
  process = factory.create(tff.TensorType(np.float32, [trials]),
                           tff.TensorType(np.float32, [2]))
  weights = [np.array([1, 0], np.float32)] * n_np + [
      np.array([0, 1], np.float32)] * n_p
  output = process.next(process.initialize(),
                        list(estimates.astype(np.float32)), weights)
  return np.asarray(output.result, np.float64)


def monte_carlo(setting: theory.PointEstimationSetting, ratios, trials: int,
                seed: int, phi: float = 1.0) -> list[MonteCarloResult]:
  """Empirical server MSE for each r, on the same client draws (paired)."""
  estimates = client_estimates(setting, trials, np.random.default_rng(seed),
                               phi)
  results = []
  for r in ratios:
    server = aggregate_once(setting, r, estimates, seed)
    results.append(
        MonteCarloResult(
            ratio=float(r),
            trials=trials,
            empirical_mse=float(np.mean((server - phi)**2)),
            theoretical_variance=theory.server_variance(setting, r)))
  return results

"""Federated point estimation (SPEC.md §1), run through the real FedHDP code.

Client j holds n_s samples x = phi + p_j + v and sends its sample mean; the
private group's mean gets Gaussian noise of variance gamma^2 from
`HeterogeneousDPFactory` itself (noise multiplier z_p = N_p gamma / S, no
clipping in effect). Each coordinate of the clients' vectors is an independent
trial, so one aggregation round gives thousands of Monte Carlo trials; the
empirical server MSE is then compared with the closed form of
`tff_hdp.estimation.point_estimation_theory`. The personalized estimates come from the
real Ditto step, on a model whose weights are the trials' estimates.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.learning import client_work
from tff_hdp.learning import ditto
from tff_hdp.estimation import point_estimation_theory as theory
from tff_hdp.aggregators.heterogeneous_dp import HeterogeneousDPFactory

# Clip norm far above any update's norm, so clipping never acts.
_NO_CLIP_NORM = 1e6


@dataclasses.dataclass(frozen=True)
class MonteCarloResult:
  ratio: float | tuple[float, ...]  # r, or one r_j per group (levels)
  trials: int
  empirical_mse: float
  theoretical_variance: float

  @property
  def relative_error(self) -> float:
    return abs(self.empirical_mse / self.theoretical_variance - 1.0)


def client_samples(
    setting: theory.PointEstimationSetting | theory.LevelsSetting,
    trials: int, rng: np.random.Generator, phi: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
  """Clients' samples [N, n_s, trials] and true means phi_j [N, trials].

  Private clients come last (levels: clients in group order).
  """
  n = setting.num_clients
  phi_j = phi + rng.normal(0.0, np.sqrt(setting.tau2), size=(n, trials))
  noise = rng.normal(0.0, np.sqrt(setting.beta2),
                     size=(n, setting.samples_per_client, trials))
  return phi_j[:, None, :] + noise, phi_j


def client_estimates(
    setting: theory.PointEstimationSetting | theory.LevelsSetting,
    trials: int, rng: np.random.Generator, phi: float = 1.0) -> np.ndarray:
  """Clients' local estimates, shape [N, trials]; private clients last."""
  return client_samples(setting, trials, rng, phi)[0].mean(axis=1)


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


def aggregate_levels_once(setting: theory.LevelsSetting, ratios,
                          estimates: np.ndarray, seed: int) -> np.ndarray:
  """One round of the FedHDP aggregator with l groups (clients in group
  order): group j's sum gets noise of std N_j gamma_j (z_j = N_j gamma_j /
  S), so its mean's noise has variance gamma_j^2."""
  _, trials = estimates.shape
  if np.linalg.norm(estimates, axis=1).max() >= _NO_CLIP_NORM:
    raise ValueError('estimates too large for the no-clipping regime.')
  sizes = setting.group_sizes
  factory = HeterogeneousDPFactory(
      noise_multipliers=[n * np.sqrt(g2) / _NO_CLIP_NORM
                         for n, g2 in zip(sizes, setting.gamma2s)],
      ratios=[float(r) for r in ratios],
      expected_group_sizes=[float(n) for n in sizes],
      initial_clip_norm=_NO_CLIP_NORM,
      clip_learning_rate=0.0,
      seed=seed)
  process = factory.create(tff.TensorType(np.float32, [trials]),
                           tff.TensorType(np.float32, [len(sizes)]))
  weights = [row for j, n in enumerate(sizes)
             for row in [np.eye(len(sizes), dtype=np.float32)[j]] * n]
  output = process.next(process.initialize(),
                        list(estimates.astype(np.float32)), weights)
  return np.asarray(output.result, np.float64)


def monte_carlo_levels(setting: theory.LevelsSetting, ratio_sets,
                       trials: int, seed: int,
                       phi: float = 1.0) -> list[MonteCarloResult]:
  """Empirical server MSE for each set of per-group ratios, on the same
  client draws (paired), beside `theory.level_server_variance`."""
  estimates = client_estimates(setting, trials, np.random.default_rng(seed),
                               phi)
  return [MonteCarloResult(
      ratio=tuple(float(r) for r in ratios), trials=trials,
      empirical_mse=float(np.mean(
          (aggregate_levels_once(setting, ratios, estimates, seed) - phi)**2)),
      theoretical_variance=theory.level_server_variance(setting, ratios))
          for ratios in ratio_sets]


class _Estimate(tf.keras.layers.Layer):
  """A model that ignores its input and outputs its weight: one estimate per
  trial."""

  def build(self, input_shape):
    self.theta = self.add_weight(name='theta', shape=input_shape[-1:],
                                 initializer='zeros')

  def call(self, inputs):
    return tf.zeros_like(inputs) + self.theta


class _HalfSquaredError(tf.keras.losses.Loss):
  """f_j = 1/2 (theta - x)^2 per trial, so grad f_j = theta - mean(x)."""

  def call(self, y_true, y_pred):
    return 0.5 * tf.reduce_sum(tf.square(y_pred - y_true), axis=-1)


def _ditto_inputs(server: np.ndarray, samples: np.ndarray, groups,
                  num_groups: int):
  """(model_fn, global weights, client data) for Ditto's step: one estimate
  per trial, at the server's; each client's samples as its one batch and
  its group (of `num_groups`) as its privacy role."""
  trials = samples.shape[2]
  spec = (tf.TensorSpec([None, trials], tf.float32),
          tf.TensorSpec([None, trials], tf.float32))

  def model_fn():
    model = tf.keras.Sequential([tf.keras.layers.InputLayer((trials,)),
                                 _Estimate()])
    return tff.learning.models.from_keras_model(
        model, loss=_HalfSquaredError(), input_spec=spec)

  global_weights = tff.learning.models.ModelWeights(
      [server.astype(np.float32)], [])
  roles = np.eye(num_groups, dtype=np.float32)
  data = [client_work.make_client_data(
      tf.data.Dataset.from_tensors((np.zeros(own.shape, np.float32),
                                    own.astype(np.float32))), roles[g])
          for own, g in zip(samples, groups)]
  return model_fn, global_weights, data


def personalized_mse(setting: theory.PointEstimationSetting, ratio: float,
                     lambdas, trials: int, seed: int, phi: float = 1.0
                     ) -> dict[float, tuple[float, float]]:
  """MSE of Ditto's personal estimates around phi_j, for each lambda.

  The global estimate is one FedHDP round with ratio r; each lambda then gets
  one full-batch Ditto step from it with eta_p = 1 / (1 + lambda), which lands
  exactly on the minimiser (phi_hat_j + lambda theta) / (1 + lambda) of the
  local FedHDP objective. Returns {lambda: (private MSE, non-private MSE)}.
  """
  samples, phi_j = client_samples(setting, trials,
                                  np.random.default_rng(seed), phi)
  server = aggregate_once(setting, ratio, samples.mean(axis=1), seed)
  n_np = setting.num_non_private
  private = (np.arange(setting.num_clients) >= n_np).astype(int)
  model_fn, global_weights, data = _ditto_inputs(server, samples, private, 2)
  results = {}
  for lam in lambdas:
    step = ditto.build_personalization(model_fn, [lam, lam], 1.0 / (1 + lam))
    personal = np.stack([np.asarray(p[0]) for p in step(
        global_weights, [global_weights.trainable] * setting.num_clients,
        data)])
    errors = np.mean((personal - phi_j)**2, axis=1)
    results[float(lam)] = (float(errors[n_np:].mean()),
                           float(errors[:n_np].mean()))
  return results


def _level_samples(setting: theory.LevelsSetting, trials: int,
                   rng: np.random.Generator, phi: float = 1.0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`client_samples` for l groups with each client's own noise (variance
  l_j^2, `LevelsSetting.local_noise2s`) added to all its samples, so that
  its sample mean is its noisy estimate; and each client's group."""
  samples, phi_j = client_samples(setting, trials, rng, phi)
  groups = np.repeat(np.arange(len(setting.group_sizes)), setting.group_sizes)
  if setting.local_noise2s:
    own = rng.normal(0.0, np.sqrt(np.asarray(setting.local_noise2s))[groups,
                                                                      None],
                     size=(len(groups), trials))
    samples = samples + own[:, None, :]
  return samples, phi_j, groups


def personalized_level_errors(setting: theory.LevelsSetting, ratios,
                              lambda_sets, trials: int, seed: int,
                              phi: float = 1.0) -> list[np.ndarray]:
  """Squared errors of Ditto's personal estimates around phi_j, per group
  and trial ([groups, trials], averaged over the group's clients), for each
  set of per-group lambdas, on the same client draws (paired).

  The global estimate is one FedHDP round at `ratios`
  (`aggregate_levels_once`); each lambda set then runs the real Ditto step
  once for every client, each client pulled with its own group's lambda,
  for as many full-batch steps (eta_p = 1 / (1 + max lambda)) as bring it
  to the minimiser (phi_hat_i + lambda_j theta) / (1 + lambda_j) within
  1e-7 of the distance.
  """
  samples, phi_j, groups = _level_samples(setting, trials,
                                          np.random.default_rng(seed), phi)
  server = aggregate_levels_once(setting, ratios, samples.mean(axis=1), seed)
  count = len(setting.group_sizes)
  model_fn, global_weights, data = _ditto_inputs(server, samples, groups,
                                                 count)
  out = []
  for lambdas in lambda_sets:
    rate = 1.0 / (1.0 + max(lambdas))
    slowest = 1.0 - rate * (1.0 + min(lambdas))
    epochs = 1 if slowest <= 0 else int(np.ceil(np.log(1e-7) /
                                                np.log(slowest)))
    step = ditto.build_personalization(model_fn, list(lambdas), rate, epochs)
    personal = np.stack([np.asarray(p[0]) for p in step(
        global_weights, [global_weights.trainable] * len(groups), data)])
    errors = (personal - phi_j)**2
    out.append(np.stack([errors[groups == j].mean(axis=0)
                         for j in range(count)]))
  return out


def empirical_optimal_lambdas(setting: theory.LevelsSetting, ratios,
                              probes, trials: int, seed: int,
                              batches: int = 10
                              ) -> tuple[np.ndarray, np.ndarray]:
  """Each group's lambda of least personal MSE, found by simulation, and
  its Monte Carlo standard error.

  On fixed draws the personal MSE at lambda is exactly
  (A + 2 lambda C + lambda^2 B) / (1 + lambda)^2 with the draws' own
  moments, so the three `probes` lambdas (each run for every group at once
  through the Ditto step, `personalized_level_errors`) determine A, B, C and
  the minimiser (A - C) / (B - C); the standard error is the spread of that
  minimiser over `batches` disjoint batches of the trials.
  """
  if len(set(probes)) != 3:
    raise ValueError(f'three distinct probe lambdas, got {probes}.')
  count = len(setting.group_sizes)
  errors = personalized_level_errors(
      setting, ratios, [[lam] * count for lam in probes], trials, seed)
  system = np.array([[1.0, 2 * lam, lam**2] for lam in probes])

  def minimiser(mse):  # mse: [probes, groups]
    scaled = mse * np.array([(1 + lam)**2 for lam in probes])[:, None]
    a, c, b = np.linalg.solve(system, scaled)
    return (a - c) / (b - c)

  stacked = np.stack(errors)  # [probes, groups, trials]
  whole = minimiser(stacked.mean(axis=2))
  parts = np.stack([minimiser(part.mean(axis=2)) for part in
                    np.array_split(stacked, batches, axis=2)])
  return whole, parts.std(axis=0, ddof=1) / np.sqrt(batches)

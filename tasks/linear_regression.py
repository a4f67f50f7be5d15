"""Synthetic federated linear regression with two private levels (FeO2 App. A).

The FeO2 appendix (FedHDP §3.6) lifts point estimation to regression: client
j holds m_s examples `x_j = F_j phi_j + v_j`, `phi_j = phi + p_j`,
`p_j ~ N(0, tau^2 I_d)`, `v ~ N(0, beta^2)`, with an orthogonal design
`F_j^T F_j = m_s I_d`, so its least-squares estimate is
`phi_hat_j ~ N(phi, sigma_c^2 I_d)`, `sigma_c^2 = beta^2 / m_s + tau^2`. A
client at privacy level k sends `phi_hat_j + N(0, N_k gamma_k^2 I_d)`.

This module generates that population, seeded, as a `FederatedTask` (the
privacy levels are the run's, e.g. `--epsilons=1,4 --opt_out_fraction=0`), and
gives the closed-form Bayes-optimal aggregation across levels that such runs
are measured against. Test responses are noiseless, so the reported MSE is the
estimation error `||theta - phi||^2` (server) or `||theta - phi_j||^2`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import tensorflow as tf

from tff_hdp.tasks import models
from tff_hdp.federated_task import Arrays
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions


@dataclasses.dataclass(frozen=True)
class LinearRegressionSetting:
  """Population parameters (FeO2 Appendix A notation)."""

  num_clients: int = 100            # N
  dim: int = 10                     # d
  samples_per_client: int = 20      # m_s
  test_samples_per_client: int = 20
  server_test_samples: int = 1000
  tau2: float = 0.1                 # variance of the client shifts p_j
  beta2: float = 1.0                # observation noise variance

  def __post_init__(self):
    if self.num_clients < 1 or self.dim < 1:
      raise ValueError('linear regression needs >= 1 client and dimension, '
                       f'got N={self.num_clients}, d={self.dim}.')
    if self.samples_per_client < self.dim:
      raise ValueError(f'the orthogonal design needs m_s >= d, got '
                       f'm_s={self.samples_per_client}, d={self.dim}.')
    if self.tau2 < 0 or self.beta2 <= 0:
      raise ValueError('tau^2 >= 0 and beta^2 > 0 are required.')

  @property
  def sigma_c2(self) -> float:
    """Per-coordinate variance of a local estimate around phi."""
    return self.beta2 / self.samples_per_client + self.tau2


@dataclasses.dataclass(frozen=True)
class Population:
  """One draw of the model: the truths and the clients' data."""

  phi: np.ndarray              # [d], the server's target
  client_phis: np.ndarray      # [N, d]
  train: dict[str, Arrays]     # F_j [m_s, d], x_j [m_s, 1]
  test: dict[str, Arrays]
  server_test: Arrays

  def local_estimates(self) -> np.ndarray:
    """Least-squares `phi_hat_j = F_j^T x_j / m_s`, shape [N, d]."""
    return np.stack([f.T @ x[:, 0] / len(x)
                     for f, x in self.train.values()])


def _orthogonal_design(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
  """An m x d matrix F with F^T F = m I_d."""
  q, _ = np.linalg.qr(rng.normal(size=(m, d)))
  return np.sqrt(m) * q


def generate(setting: LinearRegressionSetting, seed: int) -> Population:
  rng = np.random.default_rng(seed)
  s = setting
  phi = rng.normal(size=s.dim)
  client_phis = phi + rng.normal(0.0, np.sqrt(s.tau2), size=(s.num_clients,
                                                             s.dim))
  train, test = {}, {}
  for j, phi_j in enumerate(client_phis):
    f = _orthogonal_design(rng, s.samples_per_client, s.dim)
    x = f @ phi_j + rng.normal(0.0, np.sqrt(s.beta2), size=len(f))
    f_test = rng.normal(size=(s.test_samples_per_client, s.dim))
    train[f'client{j}'] = (f.astype(np.float32),
                           x.astype(np.float32).reshape(-1, 1))
    test[f'client{j}'] = (f_test.astype(np.float32),
                          (f_test @ phi_j).astype(np.float32)[:, None])
  f_server = rng.normal(size=(s.server_test_samples, s.dim))
  return Population(phi, client_phis, train, test,
                    (f_server.astype(np.float32),
                     (f_server @ phi).astype(np.float32)[:, None]))


def optimal_ratios(setting: LinearRegressionSetting,
                   group_sizes: Sequence[int],
                   gamma2s: Sequence[float]) -> list[float]:
  """Bayes-optimal `r_k = sigma_c^2 / (sigma_c^2 + N_k gamma_k^2)`.

  With FedHDP's weights `w_k = r_k N_k / sum_l r_l N_l` these make the
  aggregate the inverse-variance (Bayes-optimal) combination of the groups;
  a non-private group (gamma^2 = 0) gets r = 1.
  """
  s2 = setting.sigma_c2
  return [s2 / (s2 + n * g2) for n, g2 in zip(group_sizes, gamma2s)]


def server_variance(setting: LinearRegressionSetting,
                    group_sizes: Sequence[int], gamma2s: Sequence[float],
                    ratios: Sequence[float]) -> float:
  """Per-coordinate error variance of the server estimate with `ratios`.

  Group k's mean update has variance `(sigma_c^2 + N_k gamma_k^2) / N_k`;
  the estimate weights it by `w_k = r_k N_k / sum_l r_l N_l`. At
  `optimal_ratios` this is `1 / sum_k N_k / (sigma_c^2 + N_k gamma_k^2)`.
  """
  s2 = setting.sigma_c2
  total = sum(r * n for r, n in zip(ratios, group_sizes))
  return sum((r * n / total)**2 * (s2 + n * g2) / n
             for r, n, g2 in zip(ratios, group_sizes, gamma2s))


def load(setting: LinearRegressionSetting = LinearRegressionSetting(),
         batch_size: int = 10, seed: int = 0) -> FederatedTask:
  population = generate(setting, seed)
  return FederatedTask(
      name='linear_regression',
      client_train=population.train,
      client_test=population.test,
      server_test=population.server_test,
      keras_model_fn=lambda: models.linear(setting.dim),
      loss_fn=tf.keras.losses.MeanSquaredError,
      batch_size=batch_size,
      metric='mse')


def load_task(options: TaskOptions) -> FederatedTask:
  """CLI entry: `num_clients` sets N (default 100)."""
  setting = (LinearRegressionSetting(num_clients=options.num_clients)
             if options.num_clients else LinearRegressionSetting())
  return load(setting, batch_size=options.batch_size, seed=options.seed)

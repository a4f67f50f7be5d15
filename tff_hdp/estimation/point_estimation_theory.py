"""Closed-form theory of federated point estimation with heterogeneous DP.

FedHDP paper §3 (SPEC.md §1): client j holds n_s samples x = phi + p_j + v,
p_j ~ N(0, tau^2), v ~ N(0, beta^2); private clients' group mean carries privacy
noise of variance gamma^2. These formulas are the exact oracle that the
aggregator's Monte Carlo runs are checked against; they are never used inside
the aggregator.

Ditto's lambda per group (l groups, `LevelsSetting`). Group j has N_j
clients; a client's own estimate phi_hat_i = phi_i + e_i has error e_i of
variance alpha_j^2 = beta^2 / n_s + l_j^2 (l_j^2: noise the client adds to
its own estimate, as DP-SGD in a silo does; 0 with client-level DP at the
server); group j's mean m_j = mean_{i in j} phi_hat_i + noise of variance
gamma_j^2; the global estimate is theta = sum_j w_j m_j, w_j = r_j N_j /
sum_k r_k N_k. Ditto's personal estimate, the minimiser of
1/2 (t - phi_hat_i)^2 + lambda/2 (t - theta)^2, is
(phi_hat_i + lambda theta) / (1 + lambda), whose error around phi_i is
(a + lambda b) / (1 + lambda) with a = e_i and b = theta - phi_i. With
A = E[a^2], B = E[b^2], C = E[a b],

    E(lambda) = (A + 2 lambda C + lambda^2 B) / (1 + lambda)^2,

whose derivative vanishes where (C + lambda B)(1 + lambda) = A + 2 lambda C +
lambda^2 B, i.e. at lambda* = (A - C) / (B - C). A client of group j is the
share c_j = w_j / N_j of theta, so with V = Var(theta) =
sum_k w_k^2 ((tau^2 + alpha_k^2) / N_k + gamma_k^2):
A = alpha_j^2, C = c_j alpha_j^2, B = V + tau^2 - 2 c_j tau^2, and

    lambda_j* = alpha_j^2 (1 - c_j) / (tau^2 + V - c_j (2 tau^2 + alpha_j^2)).

Two groups at r* (an opted-out group without noise and one private group)
give FeO2's Lemma 10: lambda_np* = alpha^2 / tau^2 = 1 / Upsilon^2 exactly,
and lambda_p* within about 1% of its eq. (53) (which averages three
stationary expressions, eq. 45; the Monte Carlo through the Ditto step finds
the minimiser above). One group whose clients add their own noise and no
server noise, as N -> infinity (c_j -> 0, V -> 0), gives MR-MTL's eq. (7):
lambda* = alpha^2 / tau^2 = (sigma^2 + sigma_DP^2 / n) / (n tau^2) with
alpha^2 = sigma^2 / n + sigma_DP^2 / n^2. The formula itself is
`tff_hdp.privacy.ditto_lambdas.optimal_lambdas`, which a run reads in a
model's units from public quantities.
"""

from __future__ import annotations

import dataclasses

from tff_hdp.privacy import ditto_lambdas


@dataclasses.dataclass(frozen=True)
class PointEstimationSetting:
  """Population and noise parameters of the point-estimation problem."""

  num_clients: int          # N
  num_private: int          # N_p
  samples_per_client: int   # n_s
  tau2: float               # variance of the client shifts p_j
  beta2: float              # per-sample noise variance
  gamma2: float             # privacy noise variance of the private group mean

  def __post_init__(self):
    if not 0 < self.num_private < self.num_clients:
      raise ValueError(
          'the theory needs both private and non-private clients: '
          f'N_p={self.num_private}, N={self.num_clients}.')
    if self.samples_per_client < 1:
      raise ValueError(f'n_s must be >= 1, got {self.samples_per_client}.')
    if self.tau2 < 0 or self.beta2 <= 0 or self.gamma2 < 0:
      raise ValueError('tau^2 >= 0, beta^2 > 0 and gamma^2 >= 0 are required.')

  @property
  def num_non_private(self) -> int:
    return self.num_clients - self.num_private

  @property
  def rho_np(self) -> float:
    return self.num_non_private / self.num_clients

  @property
  def alpha2(self) -> float:
    return self.beta2 / self.samples_per_client

  @property
  def sigma_c2(self) -> float:
    """Variance of a client's local estimate around phi."""
    return self.alpha2 + self.tau2

  @property
  def private_noise(self) -> float:
    """N_p gamma^2: the per-client privacy noise variance."""
    return self.num_private * self.gamma2


def optimal_ratio(s: PointEstimationSetting) -> float:
  """r* = sigma_c^2 / (sigma_c^2 + N_p gamma^2) (Lemma 1)."""
  return s.sigma_c2 / (s.sigma_c2 + s.private_noise)


def server_variance(s: PointEstimationSetting, r: float) -> float:
  """Variance of the server estimate with private weight ratio r."""
  n_np, n_p = s.num_non_private, s.num_private
  w_np = n_np / (n_np + r * n_p)
  w_p = 1.0 - w_np
  return w_np**2 * s.sigma_c2 / n_np + w_p**2 * (s.sigma_c2 / n_p + s.gamma2)


def server_variance_optimal(s: PointEstimationSetting) -> float:
  """sigma_s,opt^2, eq. (11)."""
  num = s.sigma_c2 * (s.sigma_c2 + s.private_noise)
  return num / (s.sigma_c2 + s.rho_np * s.private_noise) / s.num_clients


def server_variance_fedavg(s: PointEstimationSetting) -> float:
  """sigma_s,fedavg^2 (r = 1), eq. (12)."""
  return (s.sigma_c2 + (1 - s.rho_np) * s.private_noise) / s.num_clients


def server_variance_dp_fedavg(s: PointEstimationSetting) -> float:
  """Every client private with the same per-client noise N_p gamma^2."""
  return (s.sigma_c2 + s.private_noise) / s.num_clients


def gap_fedavg(s: PointEstimationSetting) -> float:
  """sigma_s,fedavg^2 - sigma_s,opt^2, eq. (13)."""
  rho = s.rho_np
  return (rho * (1 - rho) * s.num_private**2 * s.gamma2**2 /
          (s.sigma_c2 + rho * s.private_noise) / s.num_clients)


def gap_dp_fedavg(s: PointEstimationSetting) -> float:
  """sigma_s,dp-fedavg^2 - sigma_s,opt^2, eq. (14)."""
  rho = s.rho_np
  return (s.private_noise * rho * (s.sigma_c2 + s.private_noise) /
          (s.sigma_c2 + rho * s.private_noise) / s.num_clients)


def optimal_lambda_non_private(s: PointEstimationSetting) -> float:
  """lambda_np* = 1 / Upsilon^2, Upsilon^2 = tau^2 / alpha^2 (eq. 15)."""
  return s.alpha2 / s.tau2


def optimal_lambda_private(s: PointEstimationSetting) -> float:
  """lambda_p* of Theorem 1 (eq. 16)."""
  n, n_p = s.num_clients, s.num_private
  u2 = s.tau2 / s.alpha2
  g2 = s.private_noise / s.alpha2
  num = n + n * u2 + (n - n_p) * g2
  den = n * u2 * (u2 + 1) + (n - n_p + 1) * u2 * g2 + g2
  return num / den


@dataclasses.dataclass(frozen=True)
class LevelsSetting:
  """Point estimation with l privacy groups (several private levels): group
  j has N_j clients, each with n_s samples as above, and its mean carries
  privacy noise of variance gamma_j^2 (0: a group without noise)."""

  group_sizes: tuple[int, ...]  # N_j
  samples_per_client: int       # n_s
  tau2: float
  beta2: float
  gamma2s: tuple[float, ...]    # gamma_j^2
  # l_j^2: noise a group-j client adds to its own estimate (DP-SGD in a
  # silo); () for none.
  local_noise2s: tuple[float, ...] = ()

  def __post_init__(self):
    if len(self.group_sizes) != len(self.gamma2s) or not self.group_sizes:
      raise ValueError('one size and one noise variance per group.')
    if self.local_noise2s and len(self.local_noise2s) != len(self.gamma2s):
      raise ValueError('one local noise variance per group, or none.')
    if min(self.group_sizes) < 1 or min(self.gamma2s) < 0 or min(
        self.local_noise2s, default=0) < 0:
      raise ValueError('N_j >= 1 and gamma_j^2, l_j^2 >= 0 are required.')
    if self.samples_per_client < 1 or self.tau2 < 0 or self.beta2 <= 0:
      raise ValueError('n_s >= 1, tau^2 >= 0 and beta^2 > 0 are required.')

  @property
  def num_clients(self) -> int:
    return sum(self.group_sizes)

  @property
  def sigma_c2(self) -> float:
    """Variance of a client's estimate around phi, before its own noise."""
    return self.beta2 / self.samples_per_client + self.tau2

  @property
  def alpha2s(self) -> tuple[float, ...]:
    """alpha_j^2: a group-j client's estimate's variance around phi_j."""
    local = self.local_noise2s or (0.0,) * len(self.gamma2s)
    return tuple(self.beta2 / self.samples_per_client + l2 for l2 in local)

  @property
  def sigma_c2s(self) -> tuple[float, ...]:
    """A group-j client's estimate's variance around phi."""
    return tuple(self.tau2 + a2 for a2 in self.alpha2s)


def level_weights(s: LevelsSetting, ratios) -> list[float]:
  """FedHDP's group weights w_j = r_j N_j / sum_k r_k N_k."""
  scaled = [r * n for r, n in zip(ratios, s.group_sizes)]
  return [x / sum(scaled) for x in scaled]


def level_server_variance(s: LevelsSetting, ratios) -> float:
  """Variance of sum_j w_j m_j: group j's mean m_j has variance
  sigma_c,j^2 / N_j + gamma_j^2, independently of the others."""
  return sum(w**2 * (c2 / n + g2) for w, c2, n, g2 in zip(
      level_weights(s, ratios), s.sigma_c2s, s.group_sizes, s.gamma2s))


def optimal_level_ratios(s: LevelsSetting) -> list[float]:
  """r_j* = sigma_c^2 / (sigma_c,j^2 + N_j gamma_j^2): inverse-variance
  weights w_j ∝ 1 / Var(m_j) = N_j / (sigma_c,j^2 + N_j gamma_j^2), as r_j
  against a group without noise's r = 1. With one private group this is
  Lemma 1's r*."""
  return [s.sigma_c2 / (c2 + n * g2)
          for c2, n, g2 in zip(s.sigma_c2s, s.group_sizes, s.gamma2s)]


def level_server_variance_optimal(s: LevelsSetting) -> float:
  """The variance at `optimal_level_ratios`: 1 / sum_j 1 / Var(m_j)."""
  return 1.0 / sum(n / (c2 + n * g2)
                   for c2, n, g2 in zip(s.sigma_c2s, s.group_sizes, s.gamma2s))


def optimal_level_lambdas(s: LevelsSetting, ratios) -> tuple[float, ...]:
  """lambda_j* of each group at combination ratios `ratios` (module
  docstring)."""
  return ditto_lambdas.optimal_lambdas(s.alpha2s, s.tau2, s.group_sizes,
                                       s.gamma2s, ratios)

"""Closed-form theory of MR-MTL for federated mean estimation (SPEC.md §2).

K silos each hold n samples `x ~ N(w_k, sigma^2)` with silo centres
`w_k ~ N(mu, tau^2)`; each silo releases its privately estimated mean
(`sigma_DP` is the std of the Gaussian noise on its sum). MR-MTL(lambda)'s
estimate is the minimizer of `1/2 (w - w_hat_k)^2 + lambda/2 (w - w_bar)^2`
(the MR-MTL paper's Lemma 6.1). These formulas are the oracle the Monte Carlo
runs through the real MR-MTL process are checked against; the process never
uses them.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class MeanEstimationSetting:
  num_silos: int      # K
  samples: int        # n per silo
  sigma: float        # per-sample std around the silo centre
  tau: float          # std of the silo centres
  sigma_dp: float     # std of the DP noise on each silo's sum

  def __post_init__(self):
    if self.num_silos < 2 or self.samples < 1:
      raise ValueError('need K >= 2 silos and n >= 1 samples, got '
                       f'{self.num_silos} and {self.samples}.')
    if self.sigma < 0 or self.tau <= 0 or self.sigma_dp < 0:
      raise ValueError('sigma >= 0, tau > 0 and sigma_DP >= 0 are required.')

  @property
  def local_variance(self) -> float:
    """sigma_loc^2 = sigma^2/n + sigma_DP^2/n^2: the local estimate's error."""
    n = self.samples
    return self.sigma**2 / n + self.sigma_dp**2 / n**2

  @property
  def optimal_lambda(self) -> float:
    """lambda* = (sigma^2 + sigma_DP^2/n) / (n tau^2)."""
    return self.local_variance / self.tau**2

  def expected_error(self, lam: float) -> float:
    """E(lambda): expected squared error of MR-MTL(lambda) at one silo."""
    if lam < 0:
      raise ValueError(f'lambda must be >= 0, got {lam}.')
    k, s2 = self.num_silos, self.local_variance
    return ((1 - 1 / k) * (s2 + lam**2 * self.tau**2) / (lam + 1)**2 +
            s2 / k)

"""dp_accounting's PLD of the Poisson-subsampled Gaussian, built faster.

`privacy_loss_distribution.from_gaussian_mechanism` (pessimistic,
connect-the-dots) spends three quarters of its time in one Python loop:
`AdditiveNoisePrivacyLoss.get_delta_for_epsilon` inverts the privacy loss
at each of its few thousand grid points one call at a time. Every PLD the
project computes (calibrations, each round's epsilon, the planner's
certificate) builds one. `from_gaussian_mechanism` here builds the same PLD
through dp_accounting's own constructor with that inversion done over the
grid at once: the same formulas (dp_accounting's `inverse_privacy_loss`,
`log_a_times_exp_b_plus_c`) on arrays, so the PMFs equal dp_accounting's
(tests/privacy/test_subsampled_gaussian_pld.py compares them, and every
epsilon, on random settings).
"""

from __future__ import annotations

import math

from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism
import numpy as np

_ADD = privacy_loss_mechanism.AdjacencyType.ADD
_REMOVE = privacy_loss_mechanism.AdjacencyType.REMOVE


class _GridGaussianPrivacyLoss(privacy_loss_mechanism.GaussianPrivacyLoss):
  """`GaussianPrivacyLoss` whose hockey-stick divergence inverts the
  privacy loss over an array of epsilons at once (sampling rate < 1)."""

  def _inverse(self, epsilons: np.ndarray) -> np.ndarray:
    """`inverse_privacy_loss` at each epsilon, branch for branch."""
    q, s = self.sampling_prob, self.sensitivity
    add = self.adjacency_type == _ADD
    # At the edge of the range dp_accounting takes the limit (ADD's inverse
    # at +inf is -inf, REMOVE's at -inf is +inf); beyond it, it refuses.
    edge = -math.log(1 - q) if add else math.log(1 - q)
    at_edge = np.isclose(epsilons, edge, rtol=1e-9, atol=0.0)
    beyond = epsilons > edge if add else epsilons <= edge
    if np.any(beyond & ~at_edge):
      raise ValueError('a privacy loss outside the subsampled range.')
    # The loss without subsampling: ADD -log(a exp(-eps) + c), REMOVE
    # log(a exp(eps) + c), a = 1/q, c = 1 - 1/q < 0; log(a e^b + c) is
    # log(a + c) at b = 0, else _log_sub(b + log(a), log(-c)).
    sign = -1.0 if add else 1.0
    b = sign * epsilons
    a, c = 1 / q, 1 - 1 / q
    d = b + np.log(a)
    with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
      inner = np.where(b == 0, np.log(a + c),
                       d + np.log1p(-np.exp(np.log(-c) - d)))
      without = sign * inner
      x = ((0.5 * s if add else -0.5 * s) -
           without * (self._standard_deviation**2) / s)
    return np.where(at_edge, -math.inf if add else math.inf, x)

  def get_delta_for_epsilon(self, epsilon):
    if self.sampling_prob == 1.0 or np.ndim(epsilon) == 0:
      return super().get_delta_for_epsilon(epsilon)
    epsilons = np.asarray(epsilon, dtype=float)
    deltas = np.zeros_like(epsilons)
    if self.adjacency_type == _ADD:
      inverse = epsilons < -math.log1p(-self.sampling_prob)
    else:
      inverse = epsilons > math.log1p(-self.sampling_prob)
      deltas[~inverse] = -np.expm1(epsilons[~inverse])
    x = self._inverse(epsilons[inverse])
    deltas[inverse] = (self.mu_upper_cdf(x) -
                       np.exp(epsilons[inverse] + self.mu_lower_log_cdf(x)))
    return np.clip(deltas, 0, 1)


def from_gaussian_mechanism(standard_deviation: float, sampling_prob: float,
                            value_discretization_interval: float
                            ) -> pld_lib.PrivacyLossDistribution:
  """dp_accounting's `from_gaussian_mechanism(standard_deviation,
  sampling_prob=..., value_discretization_interval=...)` (sensitivity 1,
  pessimistic, connect-the-dots, its default mass truncation)."""

  def single(adjacency_type):
    loss = _GridGaussianPrivacyLoss(standard_deviation,
                                    sampling_prob=sampling_prob,
                                    adjacency_type=adjacency_type)
    return pld_lib._create_pld_pmf_from_additive_noise(  # pylint: disable=protected-access
        loss, pessimistic_estimate=True,
        value_discretization_interval=value_discretization_interval,
        use_connect_dots=True)

  return pld_lib._pld_for_subsampled_mechanism(single, sampling_prob)  # pylint: disable=protected-access

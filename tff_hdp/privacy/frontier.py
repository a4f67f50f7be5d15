"""The bias/noise frontier: one-noise plans from "every client counts
equally" to individualized sampling, along one knob t in [0, 1].

The family. One Gaussian draw of std z S is added to sum_j a_j s_j (s_j
group j's sum of clipped updates), group j Poisson-sampled at rate q_j, and
the mean divides by sum_j a_j q_j N_j. Group j's sensitivity is a_j S, so
it is a subsampled Gaussian at rate q_j with multiplier rho_j = z / a_j
(with the clip count's noise, as every plan accounts it): it needs
z / a_j >= R_j(q_j), R_j(q) the least multiplier meeting its target at rate
q over the run. A client of group j counts a_j q_j in the mean in
expectation. With q_j* individualized sampling's rates (the run's q for a
group without guarantee) and the knob t, each client of group j is asked to
count w_j(t) = (q_j*)^t (relative): a_j q_j = c w_j. Then
z = c max_j w_j / g_j(q_j) over the private groups, g_j(q) = q / R_j(q),
and the noise divisor (noise on the mean S / F) is

    F = sum_j a_j q_j N_j / z = sum_j w_j N_j / max_j (w_j / g_j(q_j)).

At a fixed budget of expected private clients a round,
sum_j N_j q_j = C (individualized sampling's), F is largest when every
w_j / g_j(q_j) is equal, g_j(q_j) = lambda w_j, as lowering one group's
ratio below the others' only spends its budget share for nothing: g_j grows
with q_j (`planner`'s mu-GDP argument), so lambda is found by a 1-D root
search on the budget, each q_j kept in [1/N_j, 1]. t = 1 is individualized
sampling (w_j = q_j*: every rho_j = z*, a_j = 1, its rates and z); t = 0
is the unbiased (Horvitz-Thompson) end: every client counts the same in
expectation, whatever its level, at the price of noise. A group without
guarantee joins at the run's rate q with a_j = c w_j / q.

Solving it. Each group's rate curve Q_j(rho), the largest rate at which
multiplier rho meets its target (`accounting.calibrate_sampling_rate`), is
calibrated on a grid of rho (individualized sampling's z* among them) and
interpolated in log-log (monotone); g_j = Q_j(rho) / rho grows with rho
until the clip count's noise caps Q_j. The frontier's points (`points`)
are read from the interpolated curves; a plan (`plan`) recalibrates each
chosen rho_j exactly, so the rate it samples at always meets the target,
and takes z = max_j a_j rho_j: every group then has z / a_j >= rho_j.

The default point. With the clients' updates spread around their mean with
variance sigma_c^2 = h S^2 / d per coordinate (`group_weights`' h, the
--heterogeneity setting), a group's share of the mean
W_j = w_j N_j / sum_i w_i N_i, and the noise d S^2 / F^2 over d
coordinates, group k's squared error is bounded by

    B_k = h S^2 [(1 - W_k)^2 + sum_{j != k} W_j^2] + d S^2 / F^2,

the first term the pull of the other groups' data, the second the noise.
The default t is the one of `TILTS` with the least max_k B_k: public
quantities only (targets, sizes, rates, d, h), no privacy cost.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from scipy import interpolate
from scipy import optimize

from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.privacy_groups import with_ratios

# The knob's grid for the default point and the printed frontier.
TILTS = tuple(k / 20 for k in range(21))
# Rates of each group's curve calibrated between its ends.
_NODES = 14
# and around individualized sampling's z*, where the points lie.
_NEAR_STAR = (0.6, 0.75, 0.87, 1.15, 1.35, 1.7)
# Searches of an exact plan, each with the last one's calibrations as nodes.
_REFINEMENTS = 3


def check_tilt(tilt: float) -> None:
  """ValueError unless 0 <= t <= 1."""
  if not (isinstance(tilt, (int, float)) and 0 <= tilt <= 1):
    raise ValueError(f'the tilt t must be in [0, 1], got {tilt}.')


@dataclasses.dataclass(frozen=True)
class FrontierPoint:
  """One point of the frontier: per group its rate q_j, its scale a_j (the
  largest 1) and its share W_j of the mean; the draw's multiplier z; the
  divisor F (noise on the mean S / F); each group's bound B_k / S^2 (inf
  for a group without clients)."""

  tilt: float
  rates: tuple[float, ...]
  scales: tuple[float, ...]
  shares: tuple[float, ...]
  noise_multiplier: float
  divisor: float
  bounds: tuple[float, ...]

  @property
  def worst_bound(self) -> float:
    """max_k B_k / S^2 over the groups with clients."""
    return max(b for b in self.bounds if math.isfinite(b))


def _point(tilt: float, rates: Sequence[float], rhos: Sequence[float | None],
           weights: Sequence[float], sizes: Sequence[int],
           heterogeneity: float, num_parameters: int) -> FrontierPoint:
  """The point whose groups count `weights` at `rates`, each private
  group at least at multiplier rhos[j] (None: a group without guarantee):
  a_j ∝ w_j / q_j, z = max_j a_j rho_j, the largest a_j 1 (every a_j
  in (0, 1], as the factory takes them)."""
  scales = [w / q for w, q in zip(weights, rates)]
  top = max(scales)
  scales = [a / top for a in scales]
  z = max(a * r for a, r in zip(scales, rhos) if r is not None)
  counted = [a * q * n for a, q, n in zip(scales, rates, sizes)]
  total = sum(counted)
  shares = [c / total for c in counted]
  divisor = total / z
  pull = sum(w * w for w in shares)
  bounds = tuple(
      heterogeneity * ((1 - w)**2 + pull - w * w) + num_parameters / divisor**2
      if n > 0 else math.inf for w, n in zip(shares, sizes))
  return FrontierPoint(tilt, tuple(rates), tuple(scales), tuple(shares), z,
                       divisor, bounds)


class _RateCurve:
  """log Q_j(rho) against log rho, from calibrations on a grid between the
  multipliers at rate 1/N_j and at rate 1 (or, where the clip count's noise
  caps the rate below 1, where g_j = Q_j / rho peaks); monotone (PCHIP)."""

  def __init__(self, group, size: int, star: float, star_rate: float,
               rounds: int, count_stddev: float | None,
               accountant: accounting.Accountant):
    self._rate_at = lambda rho: accounting.calibrate_sampling_rate(
        group.epsilon, group.delta, rho, count_stddev, rounds, accountant)
    least = min(1.0, 1.0 / size)
    low = min(star, accounting.calibrate_noise_multiplier(
        group.epsilon, group.delta, accounting.PoissonSampling(
            least, accountant), rounds, count_stddev))
    try:
      high = accounting.calibrate_noise_multiplier(
          group.epsilon, group.delta,
          accounting.PoissonSampling(1.0, accountant), rounds, count_stddev)
    except accounting.LoosePldError:
      raise
    except accounting.InfeasiblePrivacyTargetError:
      high = 64 * star  # the count's noise caps the rate below 1
    high = max(high, star)
    rhos, rates = [], []
    for rho in sorted({*np.geomspace(low, high, _NODES).tolist(),
                       *(star * f for f in _NEAR_STAR if low < star * f < high),
                       star}):
      try:
        rate = star_rate if rho == star else self._rate_at(rho)
      except accounting.LoosePldError:
        raise
      except ValueError:  # dp_accounting's RDP rounds below 0 at tiny rates
        continue
      rhos.append(rho)
      rates.append(rate)
    # Only the rising part of g_j = Q_j / rho: beyond its peak a larger
    # multiplier buys less rate than it costs.
    gains = [q / r for q, r in zip(rates, rhos)]
    peak = int(np.argmax(gains))
    self._fit(rhos[:peak + 1], rates[:peak + 1])

  def _fit(self, rhos, rates) -> None:
    self.log_rhos = np.log(rhos)
    self.log_rates = np.log(rates)
    self._curve = (interpolate.PchipInterpolator(self.log_rhos,
                                                 self.log_rates)
                   if len(rhos) > 1 else None)

  def add(self, rho: float, rate: float) -> None:
    """A calibrated point inside the curve, kept as a node (an exact
    plan's: later points read the refined curve)."""
    if self.log_rhos[0] < math.log(rho) < self.log_rhos[-1]:
      known = dict(zip(np.exp(self.log_rhos), np.exp(self.log_rates)))
      known[rho] = rate
      rhos = sorted(known)
      self._fit(rhos, [known[r] for r in rhos])

  def log_rate(self, log_rho: float) -> float:
    if self._curve is None:
      return float(self.log_rates[0])
    return float(self._curve(log_rho))

  def log_gain(self, log_rho: float) -> float:
    """log g_j at multiplier exp(log_rho)."""
    return self.log_rate(log_rho) - log_rho

  def solve(self, log_target: float) -> float:
    """log rho with log g_j = `log_target`, clipped to the curve's ends."""
    low, high = self.log_rhos[0], self.log_rhos[-1]
    if self._curve is None or log_target <= self.log_gain(low):
      return float(low)
    if log_target >= self.log_gain(high):
      return float(high)
    return optimize.brentq(lambda x: self.log_gain(x) - log_target, low,
                           high, xtol=1e-14)

  def exact_rate(self, rho: float) -> float:
    """Q_j(rho), calibrated."""
    return self._rate_at(rho)


class Frontier:
  """The frontier of an individualized-sampling plan (its targets, sizes,
  sampling, rounds, clip-count noise, rates q_j* and z*, and its private
  clients a round as the budget C)."""

  def __init__(self, individualized: plans.PrivacyPlan):
    plan = self.individualized = individualized
    groups = plan.assignment.groups
    self.sizes = [int(n) for n in plan.assignment.group_sizes()]
    self.private = [j for j, g in enumerate(groups) if g.is_private]
    if not self.private:
      raise ValueError('the frontier needs a private group.')
    self.star = max(plan.noise_multipliers)
    self.base_rates = tuple(plan.rates())
    self.budget = sum(self.base_rates[j] * self.sizes[j]
                      for j in self.private)
    self._curves = {
        j: _RateCurve(groups[j], self.sizes[j], self.star,
                      self.base_rates[j], plan.rounds,
                      plan.ledger.clip_count_stddev, plan.sampling.accountant)
        for j in self.private}

  def _weights(self, tilt: float) -> list[float]:
    return [q**tilt for q in self.base_rates]

  def _log_rhos(self, tilt: float) -> dict[int, float]:
    """Each private group's log rho_j at which every w_j / g_j is equal and
    the private groups expect C clients a round (on the curves)."""
    weights = self._weights(tilt)
    curves = self._curves
    def log_rhos(log_lam):
      return {j: curves[j].solve(log_lam + math.log(weights[j]))
              for j in self.private}

    def excess(log_lam):
      rhos = log_rhos(log_lam)
      return sum(self.sizes[j] * math.exp(curves[j].log_rate(rhos[j]))
                 for j in self.private) / self.budget - 1

    ends = [(c.log_gain(c.log_rhos[0]) - math.log(weights[j]),
             c.log_gain(c.log_rhos[-1]) - math.log(weights[j]))
            for j, c in curves.items()]
    low, high = min(e[0] for e in ends) - 1, max(e[1] for e in ends) + 1
    if excess(high) <= 0:
      return log_rhos(high)
    return log_rhos(optimize.brentq(excess, low, high, xtol=1e-14))

  def point(self, tilt: float, heterogeneity: float = 1.0,
            num_parameters: int = 1) -> FrontierPoint:
    """The point at `tilt`, read from the interpolated curves (exact at
    t = 1)."""
    check_tilt(tilt)
    rates, rhos = self._solution(tilt, exact=False)
    return _point(tilt, rates, rhos, self._weights(tilt), self.sizes,
                  heterogeneity, num_parameters)

  def _solution(self, tilt, exact):
    rates = list(self.base_rates)
    rhos = [None] * len(rates)
    if tilt == 1:
      for j in self.private:
        rhos[j] = self.star
      return rates, rhos
    # Exact: the calibrated rates kept as nodes and the search redone, so
    # the budget is met to the calibrations' precision, not the grid's.
    for _ in range(_REFINEMENTS if exact else 1):
      for j, log_rho in self._log_rhos(tilt).items():
        rhos[j] = math.exp(log_rho)
        curve = self._curves[j]
        rates[j] = (curve.exact_rate(rhos[j]) if exact else
                    math.exp(curve.log_rate(log_rho)))
        if exact:
          curve.add(rhos[j], rates[j])
    return rates, rhos

  def points(self, heterogeneity: float = 1.0, num_parameters: int = 1,
             tilts: Sequence[float] = TILTS) -> list[FrontierPoint]:
    return [self.point(t, heterogeneity, num_parameters) for t in tilts]

  def default_tilt(self, heterogeneity: float, num_parameters: int) -> float:
    """The t of `TILTS` with the least worst-group bound (the larger t on
    a tie). Where every group with clients has one rate (a single level),
    every t weighs the clients alike and is the same plan: t = 1, whose
    rates are exact rather than read from the curves."""
    if len({q for q, n in zip(self.base_rates, self.sizes) if n > 0}) == 1:
      return 1.0
    found = self.points(heterogeneity, num_parameters)
    return min(found, key=lambda p: (p.worst_bound, -p.tilt)).tilt

  def plan(self, tilt: float, heterogeneity: float = 1.0,
           num_parameters: int = 1) -> plans.PrivacyPlan:
    """The run's plan at `tilt`: each private group's rate calibrated
    exactly at its rho_j, its multiplier z / a_j >= rho_j in the ledger,
    the groups at ratios a_j (their weights a_j q_j N_j / sum), the scales
    a_j and the frontier (`TILTS`, with the bound at `heterogeneity` and
    `num_parameters`) in the plan."""
    check_tilt(tilt)
    base = self.individualized
    # The frontier as the default was chosen on it: before this plan's
    # calibrations refine the curves.
    points = tuple(self.points(heterogeneity, num_parameters))
    rates, rhos = self._solution(tilt, exact=True)
    chosen = _point(tilt, rates, rhos, self._weights(tilt), self.sizes,
                    heterogeneity, num_parameters)
    z = chosen.noise_multiplier
    groups = base.assignment.groups
    multipliers = tuple(z / a if g.is_private else 0.0
                        for g, a in zip(groups, chosen.scales))
    budgets = [accounting.GroupBudget(
        g.name, rho, g.epsilon, g.delta,
        dataclasses.replace(base.sampling, q=q)) if g.is_private else None
               for g, rho, q in zip(groups, multipliers, rates)]
    return dataclasses.replace(
        base,
        assignment=with_ratios(base.assignment, chosen.scales),
        noise_multipliers=multipliers,
        expected_group_sizes=tuple(q * n for q, n in zip(rates, self.sizes)),
        expected_clients_per_round=float(np.dot(rates, self.sizes)),
        ledger=accounting.PrivacyLedger(budgets, base.sampling,
                                        base.ledger.clip_count_stddev),
        group_rates=tuple(rates),
        group_scales=chosen.scales,
        tilt=float(tilt),
        frontier=points)


def plan_frontier(assignment: GroupAssignment, sampling: accounting.Sampling,
                  rounds: int, clip: plans.ClipSettings,
                  tilt: float | None = None, heterogeneity: float = 1.0,
                  num_parameters: int = 1, denominator: str = 'expected',
                  allow_large_delta: bool = False) -> plans.PrivacyPlan:
  """The frontier's plan at `tilt` (None: `Frontier.default_tilt` for
  `heterogeneity` h and `num_parameters` d), from individualized
  sampling's plan of the same arguments.

  Raises:
    ValueError: a tilt outside [0, 1], fixed-size sampling, realized
      denominators, no private group, or a group without clients.
    InfeasiblePrivacyTargetError: as `plans.plan_individualized_sampling`.
  """
  if tilt is not None:
    check_tilt(tilt)
  frontier = Frontier(plans.plan_individualized_sampling(
      assignment, sampling, rounds, clip, denominator, allow_large_delta))
  if tilt is None:
    tilt = frontier.default_tilt(heterogeneity, num_parameters)
  return frontier.plan(tilt, heterogeneity, num_parameters)

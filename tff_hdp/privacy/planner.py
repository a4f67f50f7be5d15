"""The trusted rules' plans side by side, and the best plan with one noise draw.

`plan_rules` plans each trusted rule through the functions a run plans it
with (`plans.plan_privacy`, `plans.plan_individualized_sampling`,
`group_weights.noise_aware_ratios`), so what it prints is what a run
applies; `noise_divisors` is the one place a plan's noise on the mean is
computed (the run's ratios line prints it too).

The best one-noise plan. One Gaussian draw of std z S is added to
sum_j a_j (group j's sum of clipped updates), group j Poisson-sampled at
rate q_j, and the mean divides by sum_j a_j q_j N_j. Group j's sensitivity
is a_j S, so it is a subsampled Gaussian at rate q_j with noise multiplier
rho_j = z / a_j (and the clip count's noise, as every plan accounts it). The
noise on the mean is z / sum_j a_j q_j N_j = 1 / F with

    F = sum_j N_j q_j / rho_j,

so only each group's (q_j, rho_j) matters, and at a given q_j the least
rho_j its target allows, R_j(q_j) (`accounting.calibrate_noise_multiplier`;
R_j grows with q_j). Writing g_j(q) = q / R_j(q), the problem is

    max sum_j N_j g_j(q_j)  s.t.  sum_j N_j q_j <= C,  q_j in [1/N_j, 1],

C the private groups' share of the clients per round. The lower limit (each
group expects at least one client a round; `min_expected_clients`) is
needed: a rate below delta_j / T lets a group's update out without noise
and still meet (epsilon_j, delta_j), which would make F unbounded.

Structure. In the central-limit (mu-GDP) view of a subsampled Gaussian,
group j's T rounds are mu-GDP with mu = q sqrt(T (exp(rho^-2) - 1)), so its
target fixes mu_j and R_j(q) is a function of x_j = q sqrt(T) / mu_j alone.
Then N_j g_j(q_j) = c_j psi(x_j), with c_j = N_j mu_j / sqrt(T) and
psi(x) = x / rho(x) increasing and concave, and the budget reads
sum_j c_j x_j <= C: by Jensen's inequality the optimum has every x_j equal,
i.e. every rho_j equal: individualized sampling (one z, each group at its
own rate, all a_j = 1) is the optimum there. The exact accountants are not
exactly mu-GDP, hence the certificate.

Certificate (Lagrangian duality). For any lambda >= 0 and any feasible plan,
F <= D(lambda) = lambda C + sum_j N_j max_q (g_j(q) - lambda q). On
[a, b], as R_j is nondecreasing, g_j(q) - lambda q <= q (1 / R_j(a) -
lambda), whose largest value is at a or b: each group's maximum is bounded
by a grid of rates refined where the bound is loosest (branch and bound)
until it is within a share of the tolerance of the best point found. So
1 / D(lambda), with lambda searched, bounds the noise of every one-noise
plan from below: `OneNoisePlan.certified_gap` is how much better any one
could be than the plan returned.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

from scipy import optimize

from tff_hdp.privacy import accounting
from tff_hdp.privacy import group_weights
from tff_hdp.privacy import plans
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.privacy_groups import everyone_at_strictest
from tff_hdp.privacy.privacy_groups import with_ratio
from tff_hdp.privacy.privacy_groups import with_ratios

# A calibrated rho may lie above the least one by the search's precision
# (1e-12 for RDP, 1e-6 for the PLD): the bounds take R_j that much lower.
_CALIBRATION_SLACK = 1e-5


def noise_divisors(plan: plans.PrivacyPlan) -> tuple[float, float]:
  """(released, private): S over the std of the noise, per coordinate, on
  the released mean and on the private groups' part of it (their weights
  renormalized), at the expected counts D_j = q_j N_j and weights
  w_j = r_j D_j / sum_k r_k D_k (r_j the plan's ratios). Groups with their
  own draw add w_j^2 z_j^2 / D_j^2; a plan whose private groups share one
  draw of std z S on sum_j a_j (their clipped sums) (individualized
  sampling, a_j = 1; the frontier, each group's multiplier z / a_j and its
  ratio a_j) adds (sum_j w_j)^2 z^2 / (sum_j a_j D_j)^2, sums over the
  private groups. inf: no noise on the mean."""
  groups = plan.assignment.groups
  counts = [q * n for q, n in zip(plan.rates(),
                                  plan.assignment.group_sizes())]
  weighed = [g.ratio * d for g, d in zip(groups, counts)]
  total = sum(weighed)
  private = [j for j, g in enumerate(groups) if g.is_private]
  share = sum(weighed[j] for j in private) / total if total > 0 else 0.0
  if not private or share == 0:
    return math.inf, math.inf
  if plan.group_rates is not None:  # one draw for the private groups
    scales = plan.group_scales or (1.0,) * len(groups)
    z = max(plan.noise_multipliers[j] * scales[j] for j in private)
    private_noise = z / sum(scales[j] * counts[j] for j in private)
  else:
    weight = sum(weighed[j] for j in private)
    private_noise = math.sqrt(sum(
        (weighed[j] / weight * plan.noise_multipliers[j] / counts[j])**2
        for j in private if weighed[j] > 0))
  released = share * private_noise
  return (1 / released if released > 0 else math.inf,
          1 / private_noise if private_noise > 0 else math.inf)


def noise_aware_group_ratios(plan: plans.PrivacyPlan, num_parameters: int,
                             heterogeneity: float = 1.0
                             ) -> tuple[float, ...]:
  """FedHDP's noise-aware ratio of each group of `plan` (`group_weights`),
  from its noise multiplier and expected count q_j N_j."""
  sizes = plan.assignment.group_sizes()
  return group_weights.noise_aware_ratios(
      plan.noise_multipliers, [q * n for q, n in zip(plan.rates(), sizes)],
      num_parameters, heterogeneity)


def merged_ratios(plan: plans.PrivacyPlan, num_parameters: int,
                  heterogeneity: float = 1.0,
                  noise_multiplier: float | None = None
                  ) -> tuple[float, ...]:
  """The noise-aware ratios of a plan whose private groups share one noise
  draw at `noise_multiplier` (None: the plan's largest): the merged private
  group (its count the private groups' expected count) first, then each
  non-private group in order."""
  groups = plan.assignment.groups
  counts = [q * n for q, n in zip(plan.rates(),
                                  plan.assignment.group_sizes())]
  expected = [c if d is None else d
              for c, d in zip(counts, plan.expected_group_sizes)]
  z = (max(plan.noise_multipliers) if noise_multiplier is None
       else noise_multiplier)
  others = [j for j, g in enumerate(groups) if not g.is_private]
  return group_weights.noise_aware_ratios(
      [z] + [0.0] * len(others),
      [sum(d for d, g in zip(expected, groups) if g.is_private)] +
      [counts[j] for j in others], num_parameters, heterogeneity)


def merged_group_ratios(plan: plans.PrivacyPlan, num_parameters: int,
                        heterogeneity: float = 1.0,
                        noise_multiplier: float | None = None
                        ) -> tuple[float, ...]:
  """`merged_ratios` per group: each private group at the merged one's."""
  ratios = merged_ratios(plan, num_parameters, heterogeneity,
                         noise_multiplier)
  others = [j for j, g in enumerate(plan.assignment.groups)
            if not g.is_private]
  return tuple(ratios[1 + others.index(j)] if j in others else ratios[0]
               for j in range(plan.assignment.num_groups))


@dataclasses.dataclass(frozen=True)
class RulePlan:
  """One trusted rule's plan as a run applies it (its groups at the ratios
  its factory weighs them with) and its noise on the mean."""

  algorithm: str
  title: str
  plan: plans.PrivacyPlan

  @property
  def divisors(self) -> tuple[float, float]:
    """`noise_divisors` of the plan: (released, private)."""
    return noise_divisors(self.plan)

  def weights(self) -> tuple[float, ...]:
    """w_j = r_j q_j N_j / sum_k r_k q_k N_k, per group."""
    counts = [g.ratio * q * n for g, q, n in zip(
        self.plan.assignment.groups, self.plan.rates(),
        self.plan.assignment.group_sizes())]
    total = sum(counts)
    return tuple(c / total if total > 0 else 0.0 for c in counts)


def plan_rules(assignment: GroupAssignment, sampling: accounting.Sampling,
               rounds: int, clip: plans.ClipSettings, num_parameters: int,
               heterogeneity: float = 1.0,
               allow_large_delta: bool = False) -> list[RulePlan]:
  """FedHDP at r = 1 and at the noise-aware ratios, individualized sampling
  (Poisson sampling only) and DP-FedAvg (everyone at the strictest level),
  each planned as its run plans it."""
  def fedhdp(groups):
    return plans.plan_privacy(groups, sampling, rounds, clip,
                              allow_large_delta=allow_large_delta)

  by_size = fedhdp(with_ratio(assignment, 1.0))
  base = fedhdp(assignment)
  rules = [
      RulePlan('fedhdp --r=1', 'FedHDP, weights by size', by_size),
      RulePlan('fedhdp', 'FedHDP, noise-aware ratios', dataclasses.replace(
          base, assignment=with_ratios(base.assignment, noise_aware_group_ratios(
              base, num_parameters, heterogeneity))))]
  if isinstance(sampling, accounting.PoissonSampling):
    one = plans.plan_individualized_sampling(
        assignment, sampling, rounds, clip, allow_large_delta=allow_large_delta)
    rules.append(RulePlan(
        'individualized_sampling', 'individualized sampling',
        dataclasses.replace(one, assignment=with_ratios(
            one.assignment, merged_group_ratios(one, num_parameters,
                                                heterogeneity)))))
  rules.append(RulePlan('dp_fedavg', 'DP-FedAvg, everyone at the strictest',
                        fedhdp(everyone_at_strictest(assignment))))
  return rules


@dataclasses.dataclass(frozen=True)
class OneNoisePlan:
  """The best one-noise plan found over the private groups, and a bound no
  one-noise plan passes (module docstring).

  `rates` q_j, `noise_multipliers` rho_j = z / a_j and `weights` a_j (the
  largest 1) per private group; `divisor` F, the plan's noise on the
  private groups' mean being S / F; `divisor_bound` D(lambda) at the
  `multiplier` lambda found, above every one-noise plan's F."""

  groups: tuple[str, ...]
  rates: tuple[float, ...]
  noise_multipliers: tuple[float, ...]
  weights: tuple[float, ...]
  divisor: float
  divisor_bound: float
  multiplier: float
  rates_evaluated: int
  seconds: float
  individualized: bool

  @property
  def certified_gap(self) -> float:
    """How much smaller (as a share) any one-noise plan's noise on the mean
    can be than this plan's: D(lambda) / F - 1."""
    return self.divisor_bound / self.divisor - 1


class _Curve:
  """R_j(q), the least rho group j's target allows at rate q (inf where
  none does), cached: each costs one calibration."""

  def __init__(self, group, sampling, rounds, count_stddev):
    self._group, self._sampling = group, sampling
    self._rounds, self._count_stddev = rounds, count_stddev
    self.values: dict[float, float] = {}

  def __call__(self, q: float) -> float:
    if q not in self.values:
      try:
        self.values[q] = accounting.calibrate_noise_multiplier(
            self._group.epsilon, self._group.delta,
            dataclasses.replace(self._sampling, q=q), self._rounds,
            self._count_stddev)
      except accounting.LoosePldError:
        raise
      except accounting.InfeasiblePrivacyTargetError:
        self.values[q] = math.inf
    return self.values[q]


class _Grid:
  """The rates evaluated for one group, and the bounds they give at a
  multiplier lambda (module docstring): each interval [a, b] between two
  neighbours bounds g(q) - lambda q by q (1 / R(a) - lambda) at a or b."""

  def __init__(self, curve: _Curve, low: float, high: float,
               start: Sequence[float]):
    self.curve = curve
    points = {low, high, *(q for q in start if low < q < high)}
    points |= {low * (high / low)**(k / 4) for k in range(1, 4)}
    self.points = sorted(points)

  def value(self, q: float, lam: float) -> float:
    """g(q) - lambda q at an evaluated rate (-inf where none is feasible)."""
    r = self.curve(q)
    return q / r - lam * q if math.isfinite(r) else -math.inf

  def _bound(self, k: int, lam: float) -> float:
    a, b = self.points[k], self.points[k + 1]
    r = self.curve(a)
    if not math.isfinite(r):
      return -lam * a  # R grows with q: no rate in [a, b] is feasible
    slope = 1 / (r * (1 - _CALIBRATION_SLACK)) - lam
    return max(a * slope, b * slope)

  def upper(self, lam: float) -> float:
    return max(self._bound(k, lam) for k in range(len(self.points) - 1))

  def best(self, lam: float) -> float:
    """The evaluated rate of the largest g(q) - lambda q."""
    return max(self.points, key=lambda q: self.value(q, lam))

  def loosest(self, lam: float) -> tuple[float, int]:
    """(excess, k): how far the loosest interval's bound, the k-th, lies
    above the best value at an evaluated rate."""
    best = self.value(self.best(lam), lam)
    bounds = [(self._bound(k, lam) - best, k)
              for k in range(len(self.points) - 1)
              if self.points[k + 1] / self.points[k] > 1 + 1e-9]
    return max(bounds, default=(0.0, 0))

  def split(self, k: int) -> None:
    """Evaluates the geometric middle of the k-th interval."""
    middle = math.sqrt(self.points[k] * self.points[k + 1])
    self.curve(middle)
    self.points.insert(k + 1, middle)


def best_one_noise_plan(individualized: plans.PrivacyPlan,
                        tolerance: float = 0.01,
                        min_expected_clients: float = 1.0) -> OneNoisePlan:
  """The best one-noise plan over the private groups of `individualized`
  (a `plans.plan_individualized_sampling` plan: its targets, sizes,
  sampling, rounds and clip-count noise, and its private clients per round
  as the budget C), with the bound D(lambda): the grids are refined at the
  lambda that minimizes it until their looseness is below half of
  `tolerance` (of F).

  Raises:
    LoosePldError: a rate at which the PLD's bound is too loose.
  """
  start_time = time.perf_counter()
  plan = individualized
  groups = plan.assignment.groups
  sizes = plan.assignment.group_sizes()
  private = [j for j, g in enumerate(groups) if g.is_private]
  budget = sum(plan.rates()[j] * sizes[j] for j in private)
  z = max(plan.noise_multipliers)
  found = budget / z  # individualized sampling's F
  grids = {}
  for j in private:
    low = min(1.0, min_expected_clients / sizes[j])
    high = max(low, min(1.0, budget / sizes[j]))
    grids[j] = _Grid(_Curve(groups[j], plan.sampling, plan.rounds,
                            plan.ledger.clip_count_stddev), low, high,
                     [plan.rates()[j] * f for f in (1 / 1.1, 1.0, 1.1)])
  share = tolerance * found / (2 * len(private))

  def upper(log_lam):
    lam = math.exp(log_lam)
    return lam * budget + sum(sizes[j] * grids[j].upper(lam) for j in private)

  def least_bound():
    # D(lambda) is convex; its least over lambda from 1e-9 to 1 / min R.
    top = max(1 / grids[j].curve(grids[j].points[0]) for j in private)
    result = optimize.minimize_scalar(
        upper, bounds=(math.log(1e-9), math.log(2 * top)), method='bounded',
        options={'xatol': 1e-4})
    return math.exp(result.x), result.fun

  best, chosen = found, {j: (plan.rates()[j], z) for j in private}

  def improve(lam):
    """The rates evaluated that maximize g_j(q) - lambda' q, for lambda'
    from lambda up, are a plan where they fit the budget."""
    nonlocal best, chosen
    for factor in (1.0, 1.01, 1.03, 1.1, 1.3, 2.0):
      picks = {j: grids[j].best(lam * factor) for j in private}
      if sum(picks[j] * sizes[j] for j in private) > budget * (1 + 1e-12):
        continue
      value = sum(sizes[j] * q / grids[j].curve(q) for j, q in picks.items())
      if value > best:
        best, chosen = value, {j: (q, grids[j].curve(q))
                               for j, q in picks.items()}

  # Best first: the loosest interval (weighed by N_j) is split until the
  # bound certifies `tolerance` or no interval is looser than its share.
  while True:
    lam, bound = least_bound()
    improve(lam)
    if bound <= best * (1 + tolerance):
      break
    excess, j, k = max((sizes[j] * grids[j].loosest(lam)[0], j,
                        grids[j].loosest(lam)[1]) for j in private)
    if excess <= share:
      break
    grids[j].split(k)
  rhos = tuple(chosen[j][1] for j in private)
  return OneNoisePlan(
      groups=tuple(groups[j].name for j in private),
      rates=tuple(chosen[j][0] for j in private), noise_multipliers=rhos,
      weights=tuple(min(rhos) / r for r in rhos),
      divisor=best, divisor_bound=max(bound, best), multiplier=lam,
      rates_evaluated=sum(len(g.curve.values) for g in grids.values()),
      seconds=time.perf_counter() - start_time,
      individualized=best == found)

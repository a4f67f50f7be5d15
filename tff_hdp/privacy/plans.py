"""Privacy plans: from (epsilon, delta) targets to noise multipliers.

Two kinds of run are planned here, before anything is built. FedHDP's
trusted server adds noise per privacy group (`plan_privacy`: one noise
multiplier per private group and the ledger that tracks them); DP-SGD clients
and silos add their own noise (`plan_client_privacy`, and `plan_clients` for a
whole untrusted-server population). A plan is pure arithmetic through
`accounting`, so it can be read and tested without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from typing import Sequence

import numpy as np
from scipy import optimize

from tff_hdp.privacy import accounting
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.privacy_groups import PrivacyGroup
from tff_hdp.privacy.privacy_groups import with_ratios


@dataclasses.dataclass(frozen=True)
class ClipSettings:
  """Adaptive clipping of Andrew et al.; `learning_rate=0` fixes the norm.

  `count_stddev` is z_b, the noise std on the count of unclipped clients;
  `None` means TFF's default of 5% of the expected clients per round.
  """

  initial_norm: float = 0.1
  target_quantile: float = 0.5
  learning_rate: float = 0.2
  count_stddev: float | None = None


@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
  """Everything the aggregator and the ledger need, derived once per run."""

  assignment: GroupAssignment
  sampling: accounting.Sampling
  rounds: int
  noise_multipliers: tuple[float, ...]
  clip_count_stddev: float
  expected_group_sizes: tuple[float | None, ...]
  expected_clients_per_round: float | None
  ledger: accounting.PrivacyLedger
  # Each group's Poisson rate where the groups are sampled at their own
  # (individualized sampling); None: every client at `sampling`.
  group_rates: tuple[float, ...] | None = None
  # Each group's scale a_j on its clipped sum before the one noise draw
  # every group shares (`frontier`); None: 1, or no shared draw.
  group_scales: tuple[float, ...] | None = None
  # The frontier's knob t and its points (`frontier.FrontierPoint`, at
  # `frontier.TILTS`) where the plan is one of them.
  tilt: float | None = None
  frontier: tuple = ()

  def rates(self) -> tuple[float, ...]:
    """The rate at which each group's members join a round."""
    return self.group_rates or (self.sampling.rate,) * \
        self.assignment.num_groups

  @property
  def accounted(self) -> bool:
    """Whether the ledger's epsilon covers the released model. Realized
    denominators divide by noise-free counts of private clients (adding one
    client with a zero update rescales the output), which no event models."""
    return self.expected_clients_per_round is not None

  @property
  def adaptive_clipping(self) -> bool:
    """Whether the clip norm follows the (accounted) noisy clip count."""
    return self.ledger.clip_count_stddev is not None


def plan_privacy(assignment: GroupAssignment, sampling: accounting.Sampling,
                 rounds: int, clip: ClipSettings,
                 denominator: str = 'expected',
                 allow_large_delta: bool = False) -> PrivacyPlan:
  """Calibrates z_j per private group for `rounds` rounds of `sampling`.

  `denominator='expected'` divides each private group's noisy sum by its
  expected size q N_j and the clip count by q N (the privacy-sound TF Privacy
  convention); 'realized' uses the round's counts as the paper writes them.
  Non-private groups always use their realized count. A private group's
  delta must be below 1/N_j unless `allow_large_delta` (experiments only).
  """
  if denominator not in ('expected', 'realized'):
    raise ValueError(
        f"denominator must be 'expected' or 'realized', got {denominator!r}.")
  sizes = assignment.group_sizes()
  population = int(sizes.sum())
  if isinstance(sampling, accounting.FixedSizeSampling):
    if sampling.population != population:
      raise ValueError(
          f'sampling population {sampling.population} differs from the '
          f'{population} clients assigned to privacy groups.')
  q = sampling.rate
  any_private = any(g.is_private for g in assignment.groups)
  adaptive = clip.learning_rate > 0
  count_stddev = clip.count_stddev
  if count_stddev is None:
    count_stddev = (tff_clip_count_stddev(sampling, population)
                    if (any_private and adaptive) else 0.0)
  accounted_count_stddev = count_stddev if adaptive else None
  budgets = []
  multipliers = []
  expected = []
  for j, group in enumerate(assignment.groups):
    if group.is_private:
      if sizes[j] == 0:
        raise ValueError(f'privacy group {group.name!r} has no clients.')
      accounting.check_delta(group.delta, int(sizes[j]),
                             f'privacy group {group.name!r}',
                             allow_large_delta)
      z = accounting.calibrate_noise_multiplier(
          group.epsilon, group.delta, sampling, rounds, accounted_count_stddev)
      budgets.append(
          accounting.GroupBudget(group.name, z, group.epsilon, group.delta))
      multipliers.append(z)
      expected.append(q * sizes[j] if denominator == 'expected' else None)
    else:
      budgets.append(None)
      multipliers.append(0.0)
      expected.append(None)
  ledger = accounting.PrivacyLedger(budgets, sampling, accounted_count_stddev)
  return PrivacyPlan(
      assignment=assignment,
      sampling=sampling,
      rounds=rounds,
      noise_multipliers=tuple(multipliers),
      clip_count_stddev=count_stddev,
      expected_group_sizes=tuple(expected),
      expected_clients_per_round=(q * population if denominator == 'expected'
                                  else None),
      ledger=ledger)


def plan_individualized_sampling(assignment: GroupAssignment,
                                 sampling: accounting.Sampling, rounds: int,
                                 clip: ClipSettings,
                                 denominator: str = 'expected',
                                 allow_large_delta: bool = False
                                 ) -> PrivacyPlan:
  """Individualized sampling (IDP-FedAvg's SAMPLE; Boenisch et al.'s
  IDP-SGD): one noise multiplier z for every private client, each private
  group sampled at its own Poisson rate q_j, the largest that keeps the
  group within its (epsilon_j, delta_j) over `rounds` rounds at z (with the
  clip count's noise, as `plan_privacy` accounts it). z is the one at which
  the private groups' expected clients per round, sum_j q_j N_j, equal
  those of `sampling` (q N_private): the same work a round as a plan at one
  rate, spent on the looser groups' clients. Non-private groups join at
  `sampling`'s rate. The noisy sums of the private groups share one noise
  draw in the factory (`algorithms`' individualized_sampling record).

  Raises:
    ValueError: fixed-size sampling (the rates are Poisson), realized
      denominators, or a group without clients.
    InfeasiblePrivacyTargetError: a target no rate meets at the clip
      count's noise, or the rates cannot reach the expected count.
  """
  if not isinstance(sampling, accounting.PoissonSampling):
    raise ValueError('individualized sampling samples each group at its own '
                     'Poisson rate: use --sampling=poisson.')
  if denominator != 'expected':
    raise ValueError('individualized sampling divides by the expected '
                     'counts: use --denominator=expected.')
  base = plan_privacy(assignment, sampling, rounds, clip, denominator,
                      allow_large_delta)
  sizes = assignment.group_sizes()
  private = [j for j, g in enumerate(assignment.groups) if g.is_private]
  count_stddev = base.ledger.clip_count_stddev
  wanted = sampling.q * sum(sizes[j] for j in private)

  def rates_at(z: float) -> list[float]:
    return [accounting.calibrate_sampling_rate(
        assignment.groups[j].epsilon, assignment.groups[j].delta, z,
        count_stddev, rounds, sampling.accountant) for j in private]

  def expected(z: float) -> float:
    return sum(q * sizes[j] for q, j in zip(rates_at(z), private))

  # At the strictest group's z every group joins at q or more, at the
  # loosest's at q or less: the z sought lies between (Brent's method, in
  # log z). Each rate is feasible at any z; z only sets the count.
  low, high = (f(base.noise_multipliers[j] for j in private)
               for f in (min, max))
  def excess(log_z):
    return expected(math.exp(log_z)) - wanted

  if low == high or excess(math.log(low)) >= 0:
    z = low
  elif excess(math.log(high)) <= 0:
    z = high
  else:
    z = math.exp(optimize.brentq(excess, math.log(low), math.log(high),
                                 xtol=1e-12))
  rates = [sampling.q] * assignment.num_groups
  for j, q in zip(private, rates_at(z)):
    rates[j] = q
  budgets = [accounting.GroupBudget(
      g.name, z, g.epsilon, g.delta, dataclasses.replace(sampling, q=q))
             if g.is_private else None
             for g, q in zip(assignment.groups, rates)]
  return dataclasses.replace(
      base,
      noise_multipliers=tuple(z if g.is_private else 0.0
                              for g in assignment.groups),
      expected_group_sizes=tuple(q * n if g.is_private else None for g, q, n
                                 in zip(assignment.groups, rates, sizes)),
      expected_clients_per_round=float(np.dot(rates, sizes)),
      ledger=accounting.PrivacyLedger(budgets, sampling, count_stddev),
      group_rates=tuple(rates))


def with_noise(plan: PrivacyPlan, noise_multipliers: Sequence[float],
               clip_count_stddev: float | None,
               ratios: Sequence[float] | None = None,
               participations: Sequence | None = None) -> PrivacyPlan:
  """`plan` accounting the noise a factory applies: each group's
  `noise_multipliers` and the `clip_count_stddev` (None: no count
  released, the clip norm fixed), its groups at the `ratios` the factory
  weighs them with (None: their own) and, without sampling, each group's
  `participations` where the factory caps them (None: the plan's). The
  ledger then tracks the mechanism that runs, whatever the plan calibrated;
  a group whose applied noise overspends its target has its rounds refused
  by the ledger."""
  if len(noise_multipliers) != plan.assignment.num_groups:
    raise ValueError(
        f'{len(noise_multipliers)} noise multipliers applied for '
        f'{plan.assignment.num_groups} privacy groups.')
  for group, z in zip(plan.assignment.groups, noise_multipliers):
    if group.is_private and not z > 0:
      raise ValueError(f'privacy group {group.name!r} is private, but the '
                       f'factory applies noise multiplier {z}.')
  own = participations or [None] * len(noise_multipliers)
  budgets = [accounting.GroupBudget(g.name, z, g.epsilon, g.delta,
                                    part or (old.sampling if old else None))
             if g.is_private else None
             for g, z, old, part in zip(plan.assignment.groups,
                                        noise_multipliers,
                                        plan.ledger.budgets, own)]
  assignment = (plan.assignment if ratios is None else
                with_ratios(plan.assignment, ratios))
  return dataclasses.replace(
      plan, assignment=assignment,
      noise_multipliers=tuple(float(z) for z in noise_multipliers),
      ledger=accounting.PrivacyLedger(budgets, plan.sampling,
                                      clip_count_stddev))


def with_finished(plan: PrivacyPlan, finished: Sequence[int]) -> PrivacyPlan:
  """`plan` accounting rounds in which `finished[t]` of round t's devices
  sent their update: a group whose noise the devices add (its sampling
  has `given`: distributed noise) at the shares that came, a group whose
  noise the server adds as planned (fewer devices add nothing to what any
  one of them reveals)."""
  budgets = [
      dataclasses.replace(b, sampling=b.sampling.given(finished))
      if b is not None and hasattr(b.sampling, 'given') else b
      for b in plan.ledger.budgets]
  return dataclasses.replace(plan, ledger=accounting.PrivacyLedger(
      budgets, plan.sampling, plan.ledger.clip_count_stddev))


@dataclasses.dataclass(frozen=True)
class ClientPrivacy:
  """One client's DP-SGD parameters for a whole run, and what they cost.

  `sampling_rate` is `batch_size / num_examples` rounded to float32, the
  probability the client's graph actually samples with, so the accountant
  analyses exactly the mechanism that runs.
  """

  epsilon: float
  delta: float
  num_examples: int
  batch_size: int
  rounds: int
  epochs_per_round: int
  sampling_rate: float
  steps_per_round: int
  noise_multiplier: float
  # Private selections (exponential mechanism, e.g. IFCA's cluster choice):
  # one per round in the first `selection_rounds` rounds, each
  # (selection_epsilon, 0)-DP.
  selection_epsilon: float = 0.0
  selection_rounds: int = 0
  # What bounds the epsilon: PLD at its discretization, or RDP (always with
  # private selections, which are accounted as zCDP).
  accountant: accounting.Accountant = accounting.RDP

  @property
  def expected_batch_size(self) -> float:
    return self.sampling_rate * self.num_examples

  @property
  def steps_per_epoch(self) -> int:
    return self.steps_per_round // self.epochs_per_round

  @functools.lru_cache(maxsize=None)
  def epsilon_after(self, rounds: int) -> float:
    """epsilon at `delta` after `rounds` rounds of local DP-SGD (cached)."""
    return self._epsilon_after(rounds, self.accountant)

  def rdp_epsilon_after(self, rounds: int) -> float | None:
    """RDP's epsilon after `rounds` rounds where the PLD's is the one
    printed (a cross-check: RDP's bound is the looser), else None."""
    if self.accountant.name != 'pld':
      return None
    return self._epsilon_after(rounds, accounting.RDP)

  def _epsilon_after(self, rounds: int,
                     accountant: accounting.Accountant) -> float:
    selections = min(rounds, self.selection_rounds)
    return accounting.epsilon_spent(
        self.noise_multiplier, None,
        accounting.PoissonSampling(self.sampling_rate, accountant),
        rounds * self.steps_per_round, self.delta,
        accounting.exponential_mechanism_event(
            self.selection_epsilon, selections) if selections else None)

  def update_noise_variance(self, learning_rate: float, clip_norm: float,
                            num_params: int) -> float:
    """Noise power in one round's update (SPEC §3, clipping effective).

    `sigma_i^2 = K_i s_i eta^2 p c^2 z_i^2 / b_i^2`, s_i the steps of an
    epoch (`local_epoch_steps`; SPEC writes ceil(N_i / b_i)), with the
    expected batch size in place of `b_i` because that is the denominator.
    """
    return (self.steps_per_round * learning_rate**2 * num_params *
            (clip_norm * self.noise_multiplier / self.expected_batch_size)**2)


# The DP-SGD conventions where the papers are silent (README, "Conventions"),
# in every untrusted and cross-silo run key: 1 took ceil(n/b) steps an epoch.
DP_SGD_CONVENTIONS = 2


def local_epoch_steps(num_examples: int, batch_size: int) -> int:
  """Steps of one local DP-SGD epoch: floor(n / b), at least one, each a
  Poisson sample at rate b / n, as the MR-MTL authors' code takes it (Opacus
  at q = b / n: `int(1 / q)`); the papers do not say. (The Robust-HDP
  authors' Opacus DataLoader takes ceil(n / b) steps at q = 1 / ceil(n / b);
  README, "Where the papers are silent".)"""
  return max(1, num_examples // batch_size)


# How far below a stored z another z must fail the target for the stored one
# to count as calibrated (the calibration's own precision is 1e-12 relative).
_CALIBRATION_SLACK = 1e-5


@functools.lru_cache(maxsize=None)
def plan_client_privacy(epsilon: float, delta: float, num_examples: int,
                        batch_size: int, rounds: int,
                        epochs_per_round: int = 1,
                        selection_epsilon: float = 0.0,
                        selection_rounds: int = 0,
                        allow_large_delta: bool = False,
                        known_noise_multiplier: float | None = None,
                        accountant: accounting.Accountant = accounting.RDP,
                        finer_if_loose: bool = False
                        ) -> ClientPrivacy:
  """Calibrates z for `rounds` rounds of `epochs_per_round` DP-SGD epochs.

  One epoch is `local_epoch_steps` Poisson-sampled steps. With
  `selection_rounds` > 0, that many (selection_epsilon, 0)-DP selections share
  the budget: DP-SGD gets what they leave. delta must be below 1/num_examples
  unless `allow_large_delta` (experiments only). Plans are cached: a sweep or
  a comparison of methods plans each distinct silo once
  (`accounting.calibrate_on_orders`). `known_noise_multiplier`, an earlier
  calibration's z (e.g. kept on disk), is used when dp_accounting confirms
  that it meets the target and that z - 1e-5 would not, at the best order
  (`accounting.is_calibrated`: it is what the calibration finds); otherwise
  z is calibrated afresh, so a stale or altered value costs time, never
  privacy or utility.

  With the PLD `accountant` (and no selections, which RDP composes as
  zCDP), z is the least its pessimistic PLD meets
  (`accounting.calibrate_pld`: no RDP calibration first, three
  PLDs at School's silos), at the accountant's discretization or, with
  `finer_if_loose`, at the coarsest tenth of it whose bound is within the
  tolerance; a known z is checked as `accounting.dp_sgd_pld_holds` does.
  """
  num_examples, batch_size = int(num_examples), int(batch_size)
  if num_examples < 1 or not 1 <= batch_size <= num_examples:
    raise ValueError(
        f'batch size must be in [1, {num_examples}] (the client\'s examples), '
        f'got {batch_size}.')
  accounting.check_delta(delta, num_examples, 'the client', allow_large_delta,
                         members='examples')
  if rounds < 1 or epochs_per_round < 1:
    raise ValueError('rounds and epochs per round must be >= 1, got '
                     f'{rounds} and {epochs_per_round}.')
  q = float(np.float32(batch_size / num_examples))
  steps = epochs_per_round * local_epoch_steps(num_examples, batch_size)
  if selection_rounds < 0 or selection_rounds > rounds:
    raise ValueError(f'selection rounds must be in [0, {rounds}] (the '
                     f'rounds), got {selection_rounds}.')
  selection = (accounting.exponential_mechanism_event(
      selection_epsilon, selection_rounds) if selection_rounds else None)
  def plan(z, used=accounting.RDP):
    return ClientPrivacy(epsilon, delta, num_examples, batch_size, rounds,
                         epochs_per_round, q, steps, z,
                         selection_epsilon if selection_rounds else 0.0,
                         selection_rounds, used)

  if accountant.name == 'pld' and selection is None:
    if known_noise_multiplier is not None and known_noise_multiplier > 1e-4:
      used = accounting.dp_sgd_pld_holds(
          float(known_noise_multiplier), epsilon, delta, q, rounds * steps,
          accountant, finer_if_loose)
      if used is not None:
        return plan(float(known_noise_multiplier), used)
    return plan(*accounting.calibrate_pld(
        epsilon, delta, q, rounds * steps, accountant, finer_if_loose))
  if (known_noise_multiplier is not None and known_noise_multiplier > 1e-4
      and accounting.is_calibrated(
          float(known_noise_multiplier), None, epsilon, delta,
          accounting.PoissonSampling(q), rounds * steps, selection,
          _CALIBRATION_SLACK)):
    return plan(float(known_noise_multiplier))
  return plan(accounting.calibrate_noise_multiplier(
      epsilon, delta, accounting.PoissonSampling(q), rounds * steps, None,
      selection))


def plan_clients(epsilons: Sequence[float], delta: float,
                 num_examples: Sequence[int], batch_sizes: Sequence[int],
                 rounds: int,
                 allow_large_delta: bool = False,
                 accountant: str = 'rdp',
                 pld_discretization: float | None = None
                 ) -> list[ClientPrivacy]:
  """Each client's DP-SGD plan at its own epsilon, one local epoch a round.

  Args:
    epsilons: each client's target epsilon (what the algorithm runs it at).
    delta: the common target delta.
    num_examples: each client's number of examples.
    batch_sizes: each client's expected batch size.
    rounds: the rounds the budget must last.
    allow_large_delta: allow delta >= 1/n_i (experiments only).
    accountant, pld_discretization: how each client's epsilon is bounded
      (`dp_sgd_accountant`).

  Returns:
    One `ClientPrivacy` per client, in order.

  Raises:
    ValueError: lists of different lengths, or a delta at or above 1/n_i
      (every client is checked, by index, before any calibration runs).
  """
  if not len(epsilons) == len(num_examples) == len(batch_sizes):
    raise ValueError('one epsilon, dataset size and batch size per client.')
  for i, n in enumerate(num_examples):
    accounting.check_delta(delta, int(n), f'client {i}', allow_large_delta,
                           members='examples')
  chosen, finer = dp_sgd_accountant(accountant, pld_discretization)
  return [
      plan_client_privacy(e, delta, n, b, rounds,
                          allow_large_delta=allow_large_delta,
                          accountant=chosen, finer_if_loose=finer)
      for e, n, b in zip(epsilons, num_examples, batch_sizes)
  ]


def dp_sgd_accountant(name: str, pld_discretization: float | None
                      ) -> tuple[accounting.Accountant, bool]:
  """(accountant, finer_if_loose) of DP-SGD plans under `--accountant=name`:
  a stated `pld_discretization` is used as it is (a bound looser than the
  tolerance there is refused); none stated starts at the default 1e-3 and
  takes a tenth of it, as often as a client's bound needs (DP-SGD composes
  thousands of steps: over Robust-HDP's 200 rounds at batch 16 of 2,400,
  eps 0.85 needs 1e-4 and eps 0.2 1e-5)."""
  if name != 'pld':
    return accounting.Accountant(name), False
  if pld_discretization is None:
    return accounting.PLD, True
  return accounting.Accountant(name, pld_discretization), False


def accountant_summary(client_plans: Sequence[ClientPrivacy],
                       rounds: int) -> dict:
  """summary.json's word on the bound the clients' (silos') epsilons after
  `rounds` rounds are: 'pld' (every plan's; see each one's discretization)
  with RDP's looser bound's range beside it as a cross-check, or 'rdp'."""
  if any(p.accountant.name != 'pld' for p in client_plans):
    return {'accountant': 'rdp'}
  rdp = [p.rdp_epsilon_after(rounds) for p in client_plans]
  return {'accountant': 'pld', 'epsilon_spent_rdp_max': max(rdp),
          'epsilon_spent_rdp_min': min(rdp)}


def tff_clip_count_stddev(sampling: accounting.Sampling,
                          population: int) -> float:
  """TFF's default clip-count noise: 5% of the expected clients per round."""
  return 0.05 * sampling.rate * population


def default_clip_count_stddev(groups: Sequence[PrivacyGroup],
                              sampling: accounting.Sampling, rounds: int,
                              population: int) -> tuple[float, bool]:
  """The clip-count noise z_b a run uses when none is given.

  TFF's default is 5% of the expected clients per round. With few clients per
  round that is too little noise on the count: the count alone can then spend
  more than the strictest private level allows (the run is impossible), or
  leave the updates far more noise than the target needs. Where the 5% is
  below the effective noise multiplier z* that the strictest level needs,
  z_b = z* instead: the count then takes a quarter of the budget (in 1/z^2)
  and the updates get z* / sqrt(3/4), 15% more noise than z* alone. z* is
  rounded up to 4 significant digits (more noise on the count, never less),
  so the value a run prints is the value it uses and can be given back.

  Args:
    groups: the run's privacy levels (non-private ones are ignored).
    sampling: how clients are sampled each round.
    rounds: the rounds the budget must last.
    population: the number of clients.

  Returns:
    (z_b, derived): derived is True when z_b is z* rather than the 5%.

  Raises:
    InfeasiblePrivacyTargetError: a target that no noise meets.
  """
  tff_default = tff_clip_count_stddev(sampling, population)
  private = [g for g in groups if g.is_private]
  if not private:
    return tff_default, False
  needed = max(
      accounting.calibrate_noise_multiplier(g.epsilon, g.delta, sampling,
                                            rounds, None) for g in private)
  if tff_default >= needed:
    return tff_default, False
  return _round_up(needed, 4), True


def _round_up(x: float, digits: int) -> float:
  """`x` rounded up to `digits` significant digits, as its decimal reads."""
  value = decimal.Decimal(x)
  step = decimal.Decimal(1).scaleb(value.adjusted() - digits + 1)
  return float(value.quantize(step, rounding=decimal.ROUND_CEILING))

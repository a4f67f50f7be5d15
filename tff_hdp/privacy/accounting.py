"""Per-group privacy accounting with dp_accounting's PLD or RDP accountant.

Every private group j is protected by a sampled Gaussian mechanism per round.
Its noise multiplier is the effective one of Andrew et al. (2019, Thm. 1),
`z_eff = (z_j^-2 + (2 z_b)^-2)^-1/2`, because the clip-count query that drives
adaptive clipping also touches the group's clients. The RDP curves and the
conversion to epsilon are dp_accounting's; this module builds the events,
searches over them, and composes n runs of an event as n times its cached
curve, which is how dp_accounting's accountant composes them (tested equal
to dp_accounting composing from scratch). Its searches for a noise
multiplier or rate steer by the same RDP series summed with numpy
(`sampled_gaussian_rdp`, ~4 times faster in all) and raise what they find
until dp_accounting's own bound holds, so no target rests on that copy.

Poisson sampling may be analysed with the privacy-loss distribution instead
(`Accountant('pld')`, the command line's default): dp_accounting's
pessimistic connect-the-dots PLD of the subsampled Gaussian, composed over
the rounds. Its epsilon is an upper bound at any discretization and tight up
to it, where RDP's conversion to (epsilon, delta) is loose for the
subsampled Gaussian (the same targets with 5-9% less noise at FeO2's
settings). Fixed-size sampling, which dp_accounting's PLD does not analyse,
and runs composing a further event (IFCA's selections, accounted as zCDP)
stay with RDP.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import dp_accounting
from dp_accounting import rdp
import scipy.optimize
import scipy.special

from tff_hdp.privacy import sampled_gaussian_rdp
from tff_hdp.privacy import subsampled_gaussian_pld


class InfeasiblePrivacyTargetError(ValueError):
  """No noise multiplier meets a group's (epsilon, delta) target."""


def check_delta(delta: float, population: int, unit: str,
                allow_large: bool = False, members: str = 'clients') -> None:
  """Refuses delta >= 1/population unless `allow_large`.

  With population members, a mechanism that publishes one random member's
  data outright is (0, 1/population)-DP, so such a delta protects nobody.
  `unit` names who is protected ("privacy group 'p'", "client 3") and
  `members` what it counts ('clients' for a group, 'examples' for a DP-SGD
  client).
  """
  bound = 1.0 / population
  if delta >= bound and not allow_large:
    symbol = 'N' if members == 'clients' else 'n'
    raise InfeasiblePrivacyTargetError(
        f'--deltas={delta:g} must be below 1/{symbol} = {bound:.3g} for '
        f'{unit} ({population} {members}): a larger delta allows releasing a '
        f"whole {members[:-1]}'s data outright; pass "
        '--unsafe_allow_large_delta to accept it for an experiment.')


ACCOUNTANTS = ('pld', 'rdp')
# The PLD's stated tolerance: a calibrated epsilon whose bound may lie more
# than this share above the exact one (`pld_looseness`) is refused, naming
# the discretization; and no discretization above the maximum is taken.
PLD_TOLERANCE = 0.01
MAX_PLD_DISCRETIZATION = 1e-2
# Relative precision of a z or rate the PLD calibrates: each evaluation
# builds a PLD (~0.1 s at discretization 1e-3), so not RDP's 1e-12.
_PLD_PRECISION = 1e-6


@dataclasses.dataclass(frozen=True)
class Accountant:
  """How a Poisson-sampled Gaussian's epsilon is bounded: 'pld' (privacy-loss
  distribution at `discretization`, pessimistic) or 'rdp' (Renyi DP)."""

  name: str = 'rdp'
  discretization: float = 1e-3

  def __post_init__(self):
    if self.name not in ACCOUNTANTS:
      raise ValueError(f'accountant must be one of {", ".join(ACCOUNTANTS)}, '
                       f'got {self.name!r}.')
    if not (math.isfinite(self.discretization) and
            0 < self.discretization <= MAX_PLD_DISCRETIZATION):
      raise ValueError(
          f'the PLD discretization must be in (0, {MAX_PLD_DISCRETIZATION:g}]'
          f', got {self.discretization}.')


RDP = Accountant('rdp')
PLD = Accountant('pld')


@dataclasses.dataclass(frozen=True)
class PoissonSampling:
  """Each client joins a round independently with probability q.

  `accountant` is how the amplification this sampling gives is analysed; it
  travels with the sampling, so every group, rate and ledger planned from
  one run's sampling is accounted alike."""

  q: float
  accountant: Accountant = RDP

  def __post_init__(self):
    if not 0 < self.q <= 1:
      raise ValueError(f'sampling rate q must be in (0, 1], got {self.q}.')

  @property
  def rate(self) -> float:
    return self.q


@dataclasses.dataclass(frozen=True)
class FixedSizeSampling:
  """Exactly `clients_per_round` of `population` clients, without replacement."""

  population: int
  clients_per_round: int

  def __post_init__(self):
    if self.population < 1:
      raise ValueError(f'population must be >= 1, got {self.population}.')
    if not 1 <= self.clients_per_round <= self.population:
      raise ValueError(
          f'clients per round must be in [1, {self.population}] (the '
          f'population), got {self.clients_per_round}.')

  @property
  def rate(self) -> float:
    return self.clients_per_round / self.population


Sampling = PoissonSampling | FixedSizeSampling
# Participation that is not drawn (`min_separation.DeviceParticipation`)
# accounts itself: it has no subsampled event for dp_accounting to compose,
# and calibrates and spends through its own `calibrate` and
# `epsilon_spent`.


def _self_accounted(sampling, other) -> bool:
  """Whether `sampling` accounts itself; refuses a further event beside it
  (it is a Gaussian's curve, not an RDP one to compose with)."""
  if isinstance(sampling, (PoissonSampling, FixedSizeSampling)):
    return False
  if other is not None:
    raise ValueError(f'{type(sampling).__name__} composes no other event.')
  return True


def effective_noise_multiplier(noise_multiplier: float,
                               clip_count_stddev: float | None) -> float:
  """z_eff of a group whose clients also answer the noisy clip-count query.

  `clip_count_stddev` is the std of the Gaussian noise added to the count of
  unclipped clients (bits centred at 1/2, so its sensitivity is 1/2); `None` or
  0 noise on the count would be a non-private count and is refused unless
  adaptive clipping is off (pass None).
  """
  if noise_multiplier <= 0:
    raise ValueError(f'noise multiplier must be > 0, got {noise_multiplier}.')
  if clip_count_stddev is None:
    return noise_multiplier
  if clip_count_stddev <= 0:
    raise ValueError(
        'a private group with adaptive clipping needs clip-count noise > 0 '
        f'(got clip_count_stddev={clip_count_stddev}).')
  return (noise_multiplier**-2 + (2.0 * clip_count_stddev)**-2)**-0.5


def value_noise_multiplier(effective: float,
                           clip_count_stddev: float | None) -> float:
  """Inverse of `effective_noise_multiplier`: the z_j that gives `effective`."""
  if clip_count_stddev is None:
    return effective
  limit = 2.0 * clip_count_stddev
  if effective >= limit:
    raise InfeasiblePrivacyTargetError(
        f'the target needs an effective noise multiplier of {effective:.4g}, '
        f'but the clip-count noise (std {clip_count_stddev:.4g}) caps it below '
        f'2*z_b = {limit:.4g} however much noise is added to the updates; '
        'raise the clip-count noise, use fewer rounds, or loosen the target.')
  return (effective**-2 - limit**-2)**-0.5


def _round_event(effective: float, sampling: Sampling) -> dp_accounting.DpEvent:
  if isinstance(sampling, PoissonSampling):
    return dp_accounting.PoissonSampledDpEvent(
        sampling.q, dp_accounting.GaussianDpEvent(effective))
  # z_eff is per unit of add/remove-one sensitivity (S for the sum, 1/2 for
  # the centred clip count). Replacing one client moves the sum by 2S and the
  # count by 1, twice as much, so the multiplier per unit is z_eff / 2.
  return dp_accounting.SampledWithoutReplacementDpEvent(
      sampling.population, sampling.clients_per_round,
      dp_accounting.GaussianDpEvent(effective / 2))


def _new_accountant(sampling: Sampling) -> rdp.RdpAccountant:
  # Poisson subsampling is analysed under add/remove-one neighbours; sampling
  # a fixed number without replacement only has a replace-one analysis.
  relation = (dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
              if isinstance(sampling, PoissonSampling) else
              dp_accounting.NeighboringRelation.REPLACE_ONE)
  return rdp.RdpAccountant(neighboring_relation=relation)


def exponential_mechanism_event(epsilon: float,
                                count: int = 1) -> dp_accounting.DpEvent:
  """`count` runs of an (epsilon, 0)-DP exponential mechanism, for RDP.

  The exponential mechanism is epsilon^2/8-zCDP (Rogers & Steinke 2021, the
  bounded-range analysis the MR-MTL paper uses), i.e. RDP epsilon(alpha) =
  alpha epsilon^2 / 8 at every order: exactly the RDP curve of a Gaussian
  mechanism with noise multiplier 2 / epsilon, which is the event composed.
  """
  if not epsilon > 0:
    raise ValueError(f'selection epsilon must be > 0, got {epsilon}.')
  return dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(2.0 / epsilon), count)


def dp_event(effective: float, sampling: Sampling, rounds: int,
             other: dp_accounting.DpEvent | None = None
             ) -> dp_accounting.DpEvent:
  """The whole run of one group as a single dp_accounting event.

  `other` is composed alongside: a further mechanism that reads the same
  data (e.g. private cluster selection), fixed while the noise is searched.
  """
  run = dp_accounting.SelfComposedDpEvent(_round_event(effective, sampling),
                                          rounds)
  return run if other is None else dp_accounting.ComposedDpEvent([run, other])


@functools.lru_cache(maxsize=4096)
def _one_event_rdp(event: dp_accounting.DpEvent,
                   relation: dp_accounting.NeighboringRelation):
  """(orders, RDP curve) of one `event`, from a fresh dp_accounting
  accountant: the costly part of accounting (~0.1 s), done once per event."""
  accountant = rdp.RdpAccountant(neighboring_relation=relation)
  accountant.compose(event)
  # dp_accounting has no public getter for the curve (pinned version; tests
  # compare epsilon_spent with dp_accounting composing from scratch).
  return (accountant._orders,  # pylint: disable=protected-access
          accountant._rdp.copy())  # pylint: disable=protected-access


def _counted(event: dp_accounting.DpEvent) -> tuple[dp_accounting.DpEvent,
                                                    int]:
  """`event` as (unit event, count), unwrapping `SelfComposedDpEvent`s as
  dp_accounting does."""
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    unit, count = _counted(event.event)
    return unit, count * event.count
  return event, 1


def epsilon_spent(noise_multiplier: float, clip_count_stddev: float | None,
                  sampling: Sampling, rounds: int, delta: float,
                  other: dp_accounting.DpEvent | None = None) -> float:
  """epsilon at `delta` after `rounds` rounds (and `other`, if given).

  dp_accounting's RDP accountant composes n runs of an event as n times the
  event's RDP curve; the curves of one round and of `other`'s unit are
  cached (`_one_event_rdp`) and combined as the accountant combines them, so
  a run's every round is accounted at the cost of one (a per-round epsilon
  column, per-client ledgers) with dp_accounting's numbers, bit for bit.
  """
  if rounds < 0:
    raise ValueError(f'rounds must be >= 0, got {rounds}.')
  if _self_accounted(sampling, other):
    return sampling.epsilon_spent(noise_multiplier, clip_count_stddev,
                                  rounds, delta)
  if _uses_pld(sampling, other):
    if rounds == 0:
      return 0.0
    return pld_epsilon(
        effective_noise_multiplier(noise_multiplier, clip_count_stddev),
        sampling.q, rounds, delta, sampling.accountant.discretization)
  parts = []
  if rounds > 0:
    effective = effective_noise_multiplier(noise_multiplier,
                                           clip_count_stddev)
    parts.append((_round_event(effective, sampling), rounds))
  if other is not None:
    parts.append(_counted(other))
  if not parts:
    return 0.0
  relation = _new_accountant(sampling).neighboring_relation
  total = 0
  for unit, count in parts:
    orders, curve = _one_event_rdp(unit, relation)
    total = total + count * curve
  return rdp.rdp_privacy_accountant.compute_epsilon(orders, total, delta)[0]


def _uses_pld(sampling, other) -> bool:
  """Whether `sampling` is accounted by its PLD (see the module docstring)."""
  return (isinstance(sampling, PoissonSampling) and
          sampling.accountant.name == 'pld' and other is None)


@functools.lru_cache(maxsize=256)
def _subsampled_gaussian_pld(effective: float, q: float,
                             discretization: float):
  """One round's PLD: dp_accounting's pessimistic connect-the-dots
  subsampled Gaussian, as its `PLDAccountant` builds it for a
  `PoissonSampledDpEvent` (built over its grid at once:
  `subsampled_gaussian_pld`)."""
  return subsampled_gaussian_pld.from_gaussian_mechanism(
      effective, q, discretization)


@functools.lru_cache(maxsize=65536)
def pld_epsilon(effective: float, q: float, rounds: int, delta: float,
                discretization: float) -> float:
  """epsilon at `delta` of `rounds` Poisson(q)-sampled Gaussian rounds at
  noise multiplier `effective`, from their composed PLD: an upper bound on
  the exact epsilon at any discretization."""
  base = _subsampled_gaussian_pld(effective, q, discretization)
  return base.self_compose(rounds).get_epsilon_for_delta(delta)


def pld_looseness(effective: float, q: float, rounds: int, delta: float,
                  discretization: float) -> float:
  """An estimate of how far the PLD epsilon at `discretization` lies above
  the exact one, as a share of it: how much it grows when the interval
  doubles. The error grows about linearly with the interval, so this is
  about the error itself; it overstates it wherever it is below 5%
  (tests/privacy/test_pld_accounting.py)."""
  once = pld_epsilon(effective, q, rounds, delta, discretization)
  twice = pld_epsilon(effective, q, rounds, delta, 2 * discretization)
  return (twice - once) / once if once > 0 else 0.0


class LoosePldError(InfeasiblePrivacyTargetError):
  """The PLD's bound at the discretization asked for is too loose."""


def check_pld_looseness(effective: float, sampling: PoissonSampling,
                        rounds: int, delta: float,
                        unit: str = 'rounds') -> None:
  """Refuses a calibration whose bound is looser than `PLD_TOLERANCE`
  (`rounds` of `unit`: rounds, or DP-SGD steps)."""
  d = sampling.accountant.discretization
  loose = pld_looseness(effective, sampling.q, rounds, delta, d)
  if loose > PLD_TOLERANCE:
    raise LoosePldError(
        f'--pld_discretization={d:g} may leave the printed epsilon about '
        f'{100 * loose:.2g}% above the exact one at sampling rate '
        f'{sampling.q:.4g} over {rounds} {unit} (tolerance '
        f'{100 * PLD_TOLERANCE:g}%): pass --pld_discretization={d / 10:g} or '
        '--accountant=rdp.')


def _least_root(f, low: float, high: float) -> float:
  """An x within `_PLD_PRECISION` (relative) of the least x in [low, high]
  with f(x) <= 0, f falling in x and f(high) <= 0 < f(low); f(x) <= 0 at
  the x returned. Brent's method in log x."""
  x = math.exp(scipy.optimize.brentq(lambda u: f(math.exp(u)), math.log(low),
                                     math.log(high), xtol=_PLD_PRECISION))
  while f(x) > 0:  # Brent may end a hair below the root.
    x *= 1 + _PLD_PRECISION
  return min(x, high)


def _least_root_from(f, start: float, floor: float) -> float:
  """`_least_root` of f over [floor, inf), bracketed from `start`, where f
  is nearly always <= 0 (otherwise the bracket grows):
  `calibrate_sampling_rate`'s searches for 1/q, from one RDP order's answer
  on the accountant's own epsilon."""
  high = start
  while f(high) > 0:
    high *= 1.25
  low = max(floor, high * 0.85)
  while f(low) <= 0:
    if low <= floor:
      return low
    high, low = low, max(floor, low * 0.85)
  return _least_root(f, low, high)


# A DP-SGD plan's PLD calibration ends with its epsilon in
# [target (1 - _PLD_WINDOW), target]: its z within about as much of the least
# (epsilon falls at least as fast as 1/z); a trusted run's within
# `_PLD_PRECISION`. Tenfold finer discretizations are tried down to
# _FINEST_PLD_DISCRETIZATION where none is stated.
_PLD_WINDOW = 3e-5
_FINEST_PLD_DISCRETIZATION = 1e-6


def _gdp_epsilon_gap(mu: float, target: float, delta: float) -> float:
  """delta(target) of mu-GDP minus `delta` (Dong, Roth & Su 2022, Cor. 2.13),
  with e^eps Phi(.) taken in logs so that large targets do not overflow.
  Phi is scipy.special's ndtr, which scipy.stats.norm.cdf wraps in
  per-call argument checks that cost 300 times the evaluation (thousands
  of calls per calibration)."""
  return (scipy.special.ndtr(-target / mu + mu / 2) - math.exp(
      target + scipy.special.log_ndtr(-target / mu - mu / 2)) - delta)


def gdp_noise_multiplier(target_epsilon: float, delta: float, q: float,
                         steps: int) -> float:
  """The z at which `steps` Poisson(q)-sampled Gaussian steps meet the
  target in their central-limit mu-GDP approximation, mu = q sqrt(steps
  (e^(1/z^2) - 1)) (Bu et al. 2020; exactly mu = sqrt(steps) / z at q = 1):
  not a bound, only where the PLD's search starts (0-4% above its z at
  School's and Robust-HDP's settings)."""
  mu = scipy.optimize.brentq(_gdp_epsilon_gap, 1e-8, 1e3,
                             args=(target_epsilon, delta), xtol=1e-14)
  if q >= 1:
    return math.sqrt(steps) / mu
  return 1.0 / math.sqrt(math.log1p((mu / (q * math.sqrt(steps)))**2))


def _gdp_slope(z: float, target_epsilon: float, delta: float, q: float,
               steps: int) -> float:
  """d log epsilon / d log z at z in the same approximation: the secant's
  first slope."""
  def log_mu(x):
    return (math.log(math.sqrt(steps) / x) if q >= 1 else math.log(q) + 0.5 * (
        math.log(steps) + math.log(math.expm1(x**-2))))

  def log_eps(x):
    mu = math.exp(log_mu(x))
    try:
      return math.log(scipy.optimize.brentq(
          lambda e: _gdp_epsilon_gap(mu, e, delta), 0.0,
          2 * target_epsilon + 50, xtol=1e-14))
    except ValueError:  # no root there: the first secant step falls back
      return math.nan

  slope = (log_eps(z * 1.001) - log_eps(z)) / math.log(1.001)
  return slope if slope < 0 else -1.0


@functools.lru_cache(maxsize=None)
def _pld_noise_at(target_epsilon: float, delta: float, q: float, steps: int,
                  discretization: float, window: float) -> float:
  """The least z (to `window`, relative) whose PLD epsilon over `steps`
  steps meets the target at `discretization`: the secant method on log
  epsilon against log z from `gdp_noise_multiplier`'s z, aiming inside
  [target (1 - window), target], kept inside the bracket it has found
  (bisection when a step leaves it). Three or four PLDs where a bracket
  from RDP's z and Brent's method take ten or more, and no RDP calibration
  first; a function of its arguments only, so every process finds the
  same z."""
  aim = math.log1p(-window / 2)
  low, high = (math.log(z) for z in _Z_RANGE)

  def gap(u):
    eps = pld_epsilon(math.exp(u), q, steps, delta, discretization)
    return math.log(eps / target_epsilon) if eps > 0 else -math.inf

  start = gdp_noise_multiplier(target_epsilon, delta, q, steps)
  u = min(high, max(low, math.log(start)))
  meets = fails = None  # the least u known to meet, the largest to fail
  slope, first = _gdp_slope(start, target_epsilon, delta, q, steps), True
  g = gap(u)
  for _ in range(200):
    if g <= 0:
      meets = u if meets is None else min(meets, u)
      if g >= aim - window / 2 or u <= low:
        return math.exp(u)
    else:
      fails = u if fails is None else max(fails, u)
      if u >= high:
        raise InfeasiblePrivacyTargetError(
            f'no noise multiplier up to {_Z_RANGE[1]:g} meets (epsilon='
            f'{target_epsilon}, delta={delta}) over {steps} steps at '
            f'sampling rate {q:.4g}.')
    if meets is not None and fails is not None and (
        meets - fails <= window):
      return math.exp(meets)
    if first and math.isfinite(g):
      # The approximation's epsilon is the target at the start: off by
      # the factor e^g, which changes slowly with z, so aim it at
      # target e^(aim - g) (its curvature taken, not only its slope).
      nxt = math.log(gdp_noise_multiplier(
          target_epsilon * math.exp(aim - g), delta, q, steps))
    else:
      nxt = u + max(-1.0, min(1.0, (aim - g) / slope if math.isfinite(g)
                              else -1.0))
    first = False
    if meets is not None and fails is not None:
      if not fails < nxt < meets:
        nxt = (fails + meets) / 2
    nxt = min(high, max(low, nxt))
    g_next = gap(nxt)
    if math.isfinite(g) and math.isfinite(g_next) and nxt != u and (
        g_next - g) / (nxt - u) < 0:
      slope = (g_next - g) / (nxt - u)
    u, g = nxt, g_next
  return math.exp(meets)  # the bracket has shrunk to nothing


def _pld_rungs(accountant: Accountant, finer_if_loose: bool):
  """The discretizations a DP-SGD plan may use, coarsest first: the stated
  one only, or it and its tenfold refinements."""
  d = accountant.discretization
  yield d
  while finer_if_loose and d / 10 >= _FINEST_PLD_DISCRETIZATION * (1 - 1e-9):
    d /= 10
    yield d


def _check_target(target_epsilon: float, delta: float, steps: int,
                  unit: str) -> None:
  """Refuses a target no calibration can aim at, or no `unit` at all."""
  if not (math.isfinite(target_epsilon) and target_epsilon > 0):
    raise InfeasiblePrivacyTargetError(
        f'target epsilon must be a finite number > 0, got {target_epsilon}.')
  if not 0 < delta < 1:
    raise InfeasiblePrivacyTargetError(
        f'target delta must be in (0, 1), got {delta}.')
  if steps < 1:
    raise ValueError(f'{unit} must be >= 1, got {steps}.')


def calibrate_pld(target_epsilon: float, delta: float, q: float, steps: int,
                  accountant: Accountant, finer_if_loose: bool = False,
                  unit: str = 'DP-SGD steps', window: float = _PLD_WINDOW
                  ) -> tuple[float, Accountant]:
  """(z, the accountant it holds at) for `steps` Poisson(q)-sampled
  Gaussian `unit` (DP-SGD steps, or a trusted run's rounds): the least z
  (to `window`) whose pessimistic PLD meets (target_epsilon, delta) at
  `accountant`'s discretization (`_pld_noise_at`). A bound looser there
  than `PLD_TOLERANCE` is refused (`LoosePldError`) or, with
  `finer_if_loose` (no discretization stated), calibrated again at a
  tenth of it, and so on: DP-SGD composes thousands of steps, and the
  discretization's error grows with them."""
  _check_target(target_epsilon, delta, steps, unit)
  rungs = list(_pld_rungs(accountant, finer_if_loose))
  for d in rungs:
    used = Accountant('pld', d)
    z = _pld_noise_at(target_epsilon, delta, q, steps, d, window)
    try:
      check_pld_looseness(z, PoissonSampling(q, used), steps, delta, unit)
      return z, used
    except LoosePldError:
      if d == rungs[-1]:
        raise


def dp_sgd_pld_holds(z: float, target_epsilon: float, delta: float, q: float,
                     steps: int, accountant: Accountant,
                     finer_if_loose: bool = False) -> Accountant | None:
  """The accountant at which a stored `z` meets the target, else None: the
  first discretization whose PLD meets (target_epsilon, delta), with an
  epsilon within the window below it (so `z` is what `calibrate_pld`
  finds there, not more noise than needed).

  One PLD per rung tried, the one the run's summary prints (`pld_epsilon`
  is cached), where calibrating takes three or more. The looseness check
  is not repeated: it guards utility (a bound too far above the exact
  epsilon), never privacy, since the pessimistic PLD bounds epsilon at any
  discretization; the calibration that stored `z` made it."""
  for d in _pld_rungs(accountant, finer_if_loose):
    eps = pld_epsilon(z, q, steps, delta, d)
    if eps <= target_epsilon:
      if eps < target_epsilon * (1 - _PLD_WINDOW):
        return None
      return Accountant('pld', d)
  return None


# dp_accounting's default RDP orders: epsilon is the least bound over them.
_ORDERS = tuple(float(a) for a in rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
# Where the search over orders starts (order 8), and its strides.
_FIRST_ORDER = _ORDERS.index(8.0)
_STRIDES = (32, 8, 2, 1)
# Relative precision of z: far below any difference that matters (1e-6).
_Z_PRECISION = 1e-12
_Z_RANGE = (2.0**-30, 2.0**40)


def _meets_before_kl(order: float, target: float, delta: float) -> bool:
  """Whether the bound at `order` can reach `target` while the RDP is above
  delta: dp_accounting's conversion of an RDP of delta must be below it.
  Otherwise only the KL branch of that conversion (epsilon 0 once the RDP
  is below about delta^2, at an enormous z) would meet it there, which
  says nothing about the least z over all orders."""
  return rdp.rdp_privacy_accountant.compute_epsilon(
      [order], [delta], delta)[0] < target


def _first_feasible(target: float, delta: float) -> float | None:
  """Where searches over orders start: the first order from 8 up that can
  meet `target` (`_meets_before_kl`), or None."""
  return next((a for a in _ORDERS[_FIRST_ORDER:]
               if _meets_before_kl(a, target, delta)), None)


def _root_at_order(order, make_event, relation, target, delta) -> float:
  """The least z (to `_Z_PRECISION`) whose bound at `order` meets `target`,
  or inf (`_meets_before_kl`, or no z in `_Z_RANGE`): found from the
  power-of-two bracket that holds it and Brent's method in it, so it does
  not depend on where the search began."""
  if not _meets_before_kl(order, target, delta):
    return math.inf

  def gap(z):
    return _search_epsilon_at_order(order, make_event(z), relation,
                                    delta) - target

  k = 0
  if gap(1.0) <= 0:
    while 2.0**(k - 1) >= _Z_RANGE[0] and gap(2.0**(k - 1)) <= 0:
      k -= 1
  else:
    while gap(2.0**k) > 0:
      k += 1
      if 2.0**k > _Z_RANGE[1]:
        return math.inf
  high = 2.0**k
  z = high
  if 2.0**(k - 1) >= _Z_RANGE[0]:
    z = scipy.optimize.brentq(gap, 2.0**(k - 1), high,
                              xtol=high * _Z_PRECISION, rtol=_Z_PRECISION)
  # dp_accounting's bound decides: Brent may end a hair below the root.
  return _raised_until(
      lambda z: epsilon_at_order(order, make_event(z), relation, delta) <=
      target, z, high * _Z_PRECISION)


def _raised_until(meets, x: float, step: float) -> float:
  """The first of x, x + step, x + 3 step, x + 7 step, ... that `meets`:
  where a search steered by `sampled_gaussian_rdp` ended, raised until
  dp_accounting's bound holds (at once, but for rounding)."""
  while not meets(x):
    x += step
    step *= 2
  return x


def _search_rdp(order: float, event: dp_accounting.DpEvent,
                relation: dp_accounting.NeighboringRelation) -> float:
  """RDP of `event` at `order` to steer a search: each Poisson-subsampled
  Gaussian's from `sampled_gaussian_rdp` (dp_accounting's series, summed
  with numpy), composed as dp_accounting composes; anything else, or a
  series without precision left, from dp_accounting."""
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return event.count * _search_rdp(order, event.event, relation)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return sum(_search_rdp(order, e, relation) for e in event.events)
  if (relation is dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE and
      isinstance(event, dp_accounting.PoissonSampledDpEvent) and
      isinstance(event.event, dp_accounting.GaussianDpEvent)):
    value = sampled_gaussian_rdp.rdp(event.sampling_probability,
                                     event.event.noise_multiplier, order)
    if not math.isnan(value):
      return value
  accountant = rdp.RdpAccountant(orders=[order],
                                 neighboring_relation=relation)
  accountant.compose(event)
  return accountant._rdp[0]  # pylint: disable=protected-access


def _search_epsilon_at_order(order: float, event: dp_accounting.DpEvent,
                             relation: dp_accounting.NeighboringRelation,
                             delta: float) -> float:
  """`epsilon_at_order` from `_search_rdp`: what searches steer by."""
  divergence = abs(_search_rdp(order, event, relation))
  return rdp.rdp_privacy_accountant.compute_epsilon([order], [divergence],
                                                    delta)[0]


def _search_epsilon(event: dp_accounting.DpEvent,
                    relation: dp_accounting.NeighboringRelation,
                    delta: float) -> float:
  """The accountant's epsilon (least over `_ORDERS`) from `_search_rdp`."""
  divergence = [abs(_search_rdp(a, event, relation)) for a in _ORDERS]
  return rdp.rdp_privacy_accountant.compute_epsilon(_ORDERS, divergence,
                                                    delta)[0]


def epsilon_at_order(order: float, event: dp_accounting.DpEvent,
                     relation: dp_accounting.NeighboringRelation,
                     delta: float) -> float:
  """dp_accounting's epsilon bound for `event` from one RDP order: an upper
  bound on the accountant's (which takes the least over its orders).

  At a tiny sampling rate dp_accounting's RDP can round to a hair below 0
  (-1e-16), which its `get_epsilon` refuses: a rate search (individualized
  sampling's) passes such rates. The RDP is taken at its size there, an
  upper bound up to that rounding; elsewhere this is `get_epsilon`."""
  accountant = rdp.RdpAccountant(orders=[order],
                                 neighboring_relation=relation)
  accountant.compose(event)
  divergence = [abs(r) for r in accountant._rdp]  # pylint: disable=protected-access
  return rdp.rdp_privacy_accountant.compute_epsilon([order], divergence,
                                                    delta)[0]


def best_order(event: dp_accounting.DpEvent,
               relation: dp_accounting.NeighboringRelation, target: float,
               delta: float, start: float = _ORDERS[_FIRST_ORDER],
               strides: tuple[int, ...] = _STRIDES) -> float:
  """The order of `_ORDERS` whose bound on `event` is least among its
  neighbours, by a pattern search from `start` with `strides` (the last 1),
  over the orders that can meet `target` (`_meets_before_kl`): the
  accountant's own choice when epsilon is unimodal in the order. The
  bounds compared are `_search_rdp`'s: an order only says where to look,
  and its callers check their answer with dp_accounting's bound there."""
  bounds = {}

  def bound(i):
    if i not in bounds:
      bounds[i] = (_search_epsilon_at_order(_ORDERS[i], event, relation,
                                            delta)
                   if _meets_before_kl(_ORDERS[i], target, delta)
                   else math.inf)
    return bounds[i]

  best = _ORDERS.index(start) if start in _ORDERS else _FIRST_ORDER
  for stride in strides:
    moved = True
    while moved:
      moved = False
      for i in (best - stride, best + stride):
        if 0 <= i < len(_ORDERS) and bound(i) < bound(best):
          best, moved = i, True
          break
  return _ORDERS[best]


def calibrate_on_orders(make_event, relation: dp_accounting.NeighboringRelation,
                        target_epsilon: float, delta: float
                        ) -> tuple[float, float]:
  """The least z whose `make_event(z)` dp_accounting's RDP accountant bounds
  by (target_epsilon, delta), found one order at a time, and that order.

  dp_accounting's own search (`calibrate_dp_mechanism`) evaluates all 156
  orders at each of a dozen or more z; this solves the bound of a single
  order for z, then moves to a better order at that z (`best_order`),
  until the order is the best among its neighbours: some 20-40
  evaluations of one order instead of ~2,000. The search steers by
  `_search_rdp`; the z it ends at is raised until dp_accounting's bound at
  that order meets the target, so the z found always meets it (the
  accountant's epsilon is the least over orders, at most that one). It is
  the z of the full search when epsilon is unimodal in the order, as the
  RDP-to-DP conversion of these mechanisms is
  (tests/privacy/test_accounting.py compares both on a grid of settings).
  A target that no order meets before the KL branch of the conversion is
  left to dp_accounting's own search.
  """
  first = _first_feasible(target_epsilon, delta)
  if first is None:
    z = dp_accounting.calibrate_dp_mechanism(
        lambda: rdp.RdpAccountant(neighboring_relation=relation), make_event,
        target_epsilon, delta, dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
        tol=1e-10)
    accountant = rdp.RdpAccountant(neighboring_relation=relation)
    accountant.compose(make_event(z))
    return z, accountant.get_epsilon_and_optimal_order(delta)[1]
  order, found = first, {}
  while order not in found:
    found[order] = _root_at_order(order, make_event, relation,
                                  target_epsilon, delta)
    if math.isinf(found[order]):  # no z in range; larger orders may do
      order = _ORDERS[min(len(_ORDERS) - 1,
                          _ORDERS.index(order) + _STRIDES[-2])]
      continue
    order = best_order(make_event(found[order]), relation, target_epsilon,
                       delta, order)
  order = min(found, key=found.get)  # each meets the target; least z wins
  if math.isfinite(found[order]):
    return found[order], order
  raise InfeasiblePrivacyTargetError(
      f'no noise multiplier up to {_Z_RANGE[1]:g} meets (epsilon='
      f'{target_epsilon}, delta={delta}).')


def is_calibrated(z: float, order: float | None, target_epsilon: float,
                  target_delta: float, sampling: Sampling, steps: int,
                  other: dp_accounting.DpEvent | None, slack: float) -> bool:
  """Whether `z` is what `calibrate_noise_multiplier` finds for these
  arguments (without clip-count noise), up to `slack`: it meets the target
  at an order that is the best among its neighbours at z (`order`, an
  earlier calibration's, is where the search starts), and z - slack does not
  at that order. A few evaluations of one order, where calibrating takes
  dozens; a wrong `order` costs time, not the answer."""
  relation = _new_accountant(sampling).neighboring_relation
  event = dp_event(z, sampling, steps, other)
  known = order in _ORDERS and _meets_before_kl(order, target_epsilon,
                                                target_delta)
  start = order if known else _first_feasible(target_epsilon, target_delta)
  if start is None:
    return False
  best = best_order(event, relation, target_epsilon, target_delta, start,
                    strides=(1,) if known else _STRIDES)
  return (epsilon_at_order(best, event, relation, target_delta) <=
          target_epsilon and epsilon_at_order(
              best, dp_event(z - slack, sampling, steps, other), relation,
              target_delta) > target_epsilon)


@functools.lru_cache(maxsize=None)  # Pure: blocks and sweeps share it.
def calibrate_noise_multiplier(target_epsilon: float, target_delta: float,
                               sampling: Sampling, rounds: int,
                               clip_count_stddev: float | None,
                               other: dp_accounting.DpEvent | None = None
                               ) -> float:
  """Smallest z_j whose run of `rounds` rounds spends at most the target.

  With `other`, the run and that event together spend at most the target.
  """
  _check_target(target_epsilon, target_delta, rounds, 'rounds')
  if _self_accounted(sampling, other):
    return sampling.calibrate(target_epsilon, target_delta, rounds,
                              clip_count_stddev)
  if clip_count_stddev is not None:
    # The best any z_j can do is z_eff -> 2 z_b; check that limit first so the
    # error says why instead of failing inside the search.
    best = _new_accountant(sampling)
    try:
      if _uses_pld(sampling, other):
        best_eps = pld_epsilon(2.0 * clip_count_stddev, sampling.q, rounds,
                               target_delta,
                               sampling.accountant.discretization)
      else:
        best.compose(dp_event(2.0 * clip_count_stddev, sampling, rounds,
                              other))
        best_eps = best.get_epsilon(target_delta)
    except ValueError:
      # So much noise that dp_accounting's Renyi divergence rounds below
      # zero: the limit spends about nothing. Only a diagnostic is skipped;
      # the search below meets the target by dp_accounting's own bounds.
      best_eps = 0.0
    if best_eps > target_epsilon:
      raise InfeasiblePrivacyTargetError(
          f'(epsilon={target_epsilon}, delta={target_delta}) over {rounds} '
          f'rounds at sampling rate {sampling.rate:.4g} cannot be met: even '
          f'infinite update noise spends epsilon={best_eps:.4g} because the '
          f'clip-count noise is only {clip_count_stddev:.4g}. Raise '
          'clip_count_stddev, use fewer rounds, or loosen the target.')
  if other is not None:
    alone = _new_accountant(sampling)
    alone.compose(other)
    other_eps = alone.get_epsilon(target_delta)
    if other_eps >= target_epsilon:
      raise InfeasiblePrivacyTargetError(
          f'(epsilon={target_epsilon}, delta={target_delta}) cannot be met: '
          f'the other mechanism alone spends epsilon={other_eps:.4g}, leaving '
          'nothing for training; give it a smaller share of the budget.')
  if _uses_pld(sampling, other):
    effective, _ = calibrate_pld(target_epsilon, target_delta, sampling.q,
                                 rounds, sampling.accountant, unit='rounds',
                                 window=_PLD_PRECISION)
  else:
    effective, _ = calibrate_on_orders(
        lambda z: dp_event(z, sampling, rounds, other),
        _new_accountant(sampling).neighboring_relation, target_epsilon,
        target_delta)
  if clip_count_stddev is not None and effective >= 2.0 * clip_count_stddev:
    effective = 2.0 * clip_count_stddev * (1 - 1e-9)
  return value_noise_multiplier(effective, clip_count_stddev)


@functools.lru_cache(maxsize=None)
def calibrate_sampling_rate(target_epsilon: float, target_delta: float,
                            noise_multiplier: float,
                            clip_count_stddev: float | None,
                            rounds: int, accountant: Accountant = RDP) -> float:
  """The largest Poisson rate q <= 1 at which `rounds` rounds at
  `noise_multiplier` (and the clip count's noise) spend at most the target
  (individualized sampling: each group at its own rate, one z for all).

  Solved as `calibrate_noise_multiplier` solves for z, one RDP order at a
  time (`calibrate_on_orders`), for p = 1/q, which the epsilon falls with:
  the rate found meets dp_accounting's bound at its order, so it always
  meets the target. Below some rate RDP's conversion spends exactly 0 (its
  KL branch, delta^2 >= 1 - e^-RDP at an order) and jumps past the target
  there, which no single order's bound sees: where the rate found spends 0,
  or no order's bound is met at any rate, the rate is searched on the
  accountant's own epsilon, up to that jump (steered by `_search_rdp` at
  every order, then lowered until dp_accounting's epsilon meets the
  target). With the PLD `accountant`, the largest rate its bound allows,
  searched from RDP's rate up.

  Raises:
    InfeasiblePrivacyTargetError: no rate down to 2^-40 meets it.
  """
  effective = effective_noise_multiplier(noise_multiplier, clip_count_stddev)
  sampling = PoissonSampling(1.0, accountant)
  if epsilon_spent(noise_multiplier, clip_count_stddev, sampling, rounds,
                   target_delta) <= target_epsilon:
    return 1.0

  def event(p):
    return dp_event(effective, PoissonSampling(min(1.0, 1.0 / p)), rounds)

  relation = _new_accountant(sampling).neighboring_relation

  def rdp_gap(p):  # falls with p = 1/q, as epsilon does
    return (_search_epsilon(event(p), relation, target_delta) -
            target_epsilon)

  try:
    inverse, _ = calibrate_on_orders(event, relation, target_epsilon,
                                     target_delta)
  except InfeasiblePrivacyTargetError:
    inverse, over = 1.0, math.inf  # halve the rate until it meets it
    while over > 0:
      inverse *= 2
      if inverse > _Z_RANGE[1]:
        raise InfeasiblePrivacyTargetError(
            f'(epsilon={target_epsilon}, delta={target_delta}) over {rounds} '
            f'rounds at noise multiplier {noise_multiplier:.4g}: no sampling '
            f'rate down to {1 / _Z_RANGE[1]:.3g} meets it.') from None
      over = rdp_gap(inverse)
    steered = True
  else:  # met at one order by dp_accounting's bound
    over, steered = rdp_gap(inverse), False
  if over == -target_epsilon:  # spends 0: the KL branch
    inverse, steered = _least_root_from(rdp_gap, inverse, 1.0), True
  if steered:  # dp_accounting's epsilon decides
    inverse = _raised_until(
        lambda p: epsilon_spent(noise_multiplier, clip_count_stddev,
                                PoissonSampling(min(1.0, 1.0 / p)), rounds,
                                target_delta) <= target_epsilon,
        inverse, inverse * _PLD_PRECISION)
  if accountant.name != 'pld':
    return 1.0 / inverse

  def gap(p):  # falls with p = 1/q, as epsilon does
    return pld_epsilon(effective, min(1.0, 1.0 / p), rounds, target_delta,
                       accountant.discretization) - target_epsilon

  q = 1.0 / _least_root_from(gap, inverse, 1.0)
  check_pld_looseness(effective, PoissonSampling(q, accountant), rounds,
                      target_delta)
  return q


@dataclasses.dataclass(frozen=True)
class GroupBudget:
  """What one private group spends per round, and its target; `sampling`,
  how its members join a round, where the group has its own (individualized
  sampling; None: the ledger's)."""

  name: str
  noise_multiplier: float
  target_epsilon: float
  delta: float
  sampling: Sampling | None = None


class PrivacyLedger:
  """Tracks each private group's epsilon as rounds are run.

  The ledger is what the driver consults before a round (to refuse one that
  would exceed a target) and after it (to report the spend).
  """

  def __init__(self, budgets: list[GroupBudget | None], sampling: Sampling,
               clip_count_stddev: float | None):
    self._budgets = list(budgets)
    self._sampling = sampling
    self._clip_count_stddev = clip_count_stddev

  @property
  def budgets(self) -> list[GroupBudget | None]:
    return list(self._budgets)

  @property
  def clip_count_stddev(self) -> float | None:
    """z_b of the accounted clip-count query; None without adaptive clipping."""
    return self._clip_count_stddev

  def epsilon(self, group_index: int, rounds: int) -> float:
    """eps spent by group `group_index` after `rounds` rounds (inf if opt-out)."""
    b = self._budgets[group_index]
    if b is None:
      return math.inf
    return epsilon_spent(b.noise_multiplier, self._clip_count_stddev,
                         b.sampling or self._sampling, rounds, b.delta)

  def accountant(self, group_index: int) -> str | None:
    """Which bound group `group_index`'s epsilon is: 'pld', 'rdp', or None
    (an opt-out group, or a sampling that accounts itself by the exact
    Gaussian curve; one that converts RDP says so by its `bound`)."""
    b = self._budgets[group_index]
    if b is None:
      return None
    sampling = b.sampling or self._sampling
    if _self_accounted(sampling, None):
      return getattr(sampling, 'bound', None)
    return 'pld' if _uses_pld(sampling, None) else 'rdp'

  def rdp_epsilon(self, group_index: int, rounds: int) -> float | None:
    """RDP's epsilon for a group the PLD accounts (a cross-check printed
    beside it: PLD's bound is the tighter), else None."""
    if self.accountant(group_index) != 'pld':
      return None
    b = self._budgets[group_index]
    sampling = dataclasses.replace(b.sampling or self._sampling,
                                   accountant=RDP)
    return epsilon_spent(b.noise_multiplier, self._clip_count_stddev,
                         sampling, rounds, b.delta)

  def epsilons(self, rounds: int) -> list[float]:
    return [self.epsilon(j, rounds) for j in range(len(self._budgets))]

  def first_exceeded(self, rounds: int,
                     slack: float = 1e-6) -> tuple[GroupBudget, float] | None:
    """The first group whose spend after `rounds` exceeds its target."""
    for j, b in enumerate(self._budgets):
      if b is not None:
        eps = self.epsilon(j, rounds)
        if eps > b.target_epsilon * (1 + slack):
          return b, eps
    return None

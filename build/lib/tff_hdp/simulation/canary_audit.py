"""Canaries in an audit run, and the empirical epsilons of their scores:
canary clients per private group in a trusted-server run (`CanaryAudit`),
canary examples per DP-SGD client or silo otherwise (`client_estimates`).

`--canaries=K` adds K canaries to every private group: members like any
other (counted in the group's size, so in its expected count; sampled with
the run's secret sampling seed at the same rate; clipped and noised with the
group's parameters), whose update is a fixed direction
(`tff_hdp.learning.canaries`). K more directions per group are never
inserted. After the run every canary is scored twice: by the cosine of the
final model's change with its direction (the threat model where only the
final model is released), and by its largest cosine with any round's model
change (every round's model released, as rounds.csv's evaluations and the
checkpoints are). `tff_hdp.privacy.empirical_epsilon` turns the inserted
against the unseen scores into an estimate and a lower bound per group.

Real clients are sampled exactly as in the same run without canaries: the
canaries' draws follow theirs in the one sampling stream. Without sampling
(`--sampling=device`) canaries are devices under the same participation
rule as their group's members; a round's schedule then takes them among the
others, so real devices' rounds differ from a run without canaries, and
their privacy does not (each device's rests on its own participations).

Under sample-level DP-SGD (`--canaries=K` with an untrusted server or
cross-silo) each client or silo holds K canary examples and keeps K unseen
(`tff_hdp.learning.canaries.ExampleCanaries`); its epsilon promises privacy
against whoever sees every update it sends, so its canaries are scored on
those updates (`dp_sgd.canary_scores`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Hashable, Sequence

import numpy as np
from scipy import stats

from tff_hdp.learning.canaries import CanaryDirections
from tff_hdp.privacy import empirical_epsilon
from tff_hdp.privacy.plans import ClientPrivacy
from tff_hdp.privacy.privacy_groups import GroupAssignment

# Confidence of the lower bounds a run reports.
CONFIDENCE = 0.95
AUDIT_NOTICE = (
    'an audit run: {k} canary clients join every private group (counted in '
    'its size, sampled or scheduled, clipped and noised as members) and {k} '
    'more are kept unseen; the released model holds the canaries\' '
    'contributions.')
EXAMPLE_AUDIT_NOTICE = (
    'an audit run: {k} canary examples join every {member}\'s data '
    '(sampled at its rate and clipped like its examples, their gradient a '
    'fixed direction) and {k} more are kept unseen; each {member}\'s '
    'estimate scores every update it sends; the released models hold the '
    'canaries\' contributions.')


def example_notice(canaries: int, member: str) -> list[str]:
  """The line an audit run with `canaries` canary examples per `member`
  ('client', 'silo') announces; none without canaries."""
  return ([f'--canaries={canaries}: ' + EXAMPLE_AUDIT_NOTICE.format(
      k=canaries, member=member)] if canaries else [])


# What a per-client estimate's scores see (`dp_sgd.canary_scores`).
UPDATES_THREAT_MODEL = 'every update a client sends'


def directions_seed(seed: int) -> int:
  """The canaries' directions follow the public --seed: they are the
  audit's instrument, not a secret (the DP noise and sampling are)."""
  return int(np.random.default_rng([seed, 0xCA7A]).integers(2**31))


@dataclasses.dataclass(frozen=True)
class CanaryAudit:
  """K canaries per private group of `assignment` (the groups a
  configuration trains with): of the p-th private group's, canaries
  2Kp .. 2Kp + K - 1 (their scores' indices) are inserted and the next K
  are kept unseen."""

  assignment: GroupAssignment
  per_group: int
  directions: CanaryDirections

  @classmethod
  def create(cls, assignment: GroupAssignment, per_group: int, seed: int,
             num_params: int) -> 'CanaryAudit':
    private = [g for g in assignment.groups if g.is_private]
    if per_group < 2:
      raise ValueError(f'--canaries must be >= 2 (an estimate needs two '
                       f'scores a side), got {per_group}.')
    if not private:
      raise ValueError('--canaries: the configuration has no private group '
                       'to audit.')
    return cls(assignment, per_group,
               CanaryDirections(directions_seed(seed), num_params,
                                2 * per_group * len(private)))

  def _private(self) -> list[int]:
    return [j for j, g in enumerate(self.assignment.groups) if g.is_private]

  @functools.cached_property
  def _inserted(self) -> dict[str, tuple[int, int]]:
    """Every inserted canary's id -> (group index, Hadamard row), in the
    order of their scores."""
    k = self.per_group
    rows = self.directions.hadamard_rows()
    return {f'canary:{self.assignment.groups[j].name}:{i}':
                (j, int(rows[2 * k * p + i]))
            for p, j in enumerate(self._private()) for i in range(k)}

  def ids(self) -> list[str]:
    """The inserted canaries' client ids, in the order of their scores."""
    return list(self._inserted)

  def row(self, canary: str) -> int:
    """The Hadamard row an inserted canary is sent (its direction's)."""
    return self._inserted[canary][1]

  def with_canaries(self) -> GroupAssignment:
    """`assignment` with the inserted canaries as members of their groups."""
    groups = dict(self.assignment.client_groups)
    taken = [c for c in self._inserted if c in groups]
    if taken:
      raise ValueError(f'--canaries: client id {taken[0]!r} is a canary\'s.')
    groups.update({c: j for c, (j, _) in self._inserted.items()})
    return GroupAssignment(self.assignment.groups, groups)

  def split(self, sampled: Sequence[Hashable]
            ) -> tuple[list[Hashable], list[str]]:
    """A round's draw over real clients then canaries: (real, canaries)."""
    return ([c for c in sampled if c not in self._inserted],
            [c for c in sampled if c in self._inserted])

  def estimates(self, final_cosines: np.ndarray, max_cosines: np.ndarray
                ) -> dict[str, dict]:
    """Per private group: the empirical epsilon of the final model's scores
    and of the all-rounds scores (`empirical_epsilon.EmpiricalEpsilon`,
    as dicts); the estimates' lower limits split their confidence over the
    groups."""
    k = self.per_group
    private = self._private()
    out = {}
    for p, j in enumerate(private):
      group = self.assignment.groups[j]
      inserted = slice(2 * k * p, 2 * k * p + k)
      unseen = slice(2 * k * p + k, 2 * k * (p + 1))
      out[group.name] = {
          name: dataclasses.asdict(empirical_epsilon.empirical_epsilon(
              scores[inserted], scores[unseen], self.directions.num_params,
              group.delta, CONFIDENCE, audits=len(private)))
          for name, scores in (('final_model', np.asarray(final_cosines)),
                               ('all_rounds', np.asarray(max_cosines)))}
    return out


def client_estimates(scores: np.ndarray, plans: Sequence[ClientPrivacy],
                     spent: Sequence[float], steps_seen: Sequence[int],
                     delta: float, num_params: int) -> dict:
  """Each client's (silo's) empirical epsilon from its canary scores (float
  [clients, 2K]: its K inserted canaries, then its K unseen), beside its
  accounted epsilon `spent` and, from its plan's noise multiplier and
  sampling rate over the `steps_seen` DP-SGD steps its sent updates hold,
  the epsilon the estimate reads in expectation
  (`empirical_epsilon.expected_example_mu`), and whether its estimate
  refutes `spent` (`empirical_epsilon.alarm`, over all clients at the
  run's confidence); and the Spearman rank correlation of the estimates
  with the accounted epsilons (None when either is constant, as when every
  client has the same target)."""
  scores = np.asarray(scores)
  k = scores.shape[1] // 2
  clients = []
  for row, plan, eps, steps in zip(scores, plans, spent, steps_seen):
    expected = empirical_epsilon.expected_example_mu(
        plan.sampling_rate, steps, plan.noise_multiplier)
    clients.append(dict(
        epsilon_spent=float(eps),
        expected_estimate=empirical_epsilon.gaussian_epsilon(
            expected, 1.0, 0.0, 1.0, delta),
        **dataclasses.asdict(empirical_epsilon.empirical_epsilon(
            row[:k], row[k:], num_params, delta, CONFIDENCE,
            audits=len(scores)))))
    clients[-1]['alarm'] = empirical_epsilon.alarm(clients[-1], eps)
  estimates = [c['estimate'] for c in clients]
  # Equal targets are spent up to the accountant's search tolerance.
  constant = np.ptp(estimates) == 0 or np.ptp(spent) <= 1e-6 * max(spent)
  return {
      'threat_model': UPDATES_THREAT_MODEL,
      'clients': clients,
      'alarms': sum(c['alarm'] for c in clients),
      'rank_correlation': None if constant else float(
          stats.spearmanr(spent, estimates)[0]),
  }


def client_audit_summary(canaries: int, scores: np.ndarray,
                         plans: Sequence[ClientPrivacy],
                         spent: Sequence[float], steps_seen: Sequence[int],
                         delta: float, num_params: int) -> dict:
  """A summary's entries for an audit with `canaries` canary examples per
  client (silo): its size and confidence, and `client_estimates` of the
  other arguments."""
  return {
      'canaries': {'per_client': canaries, 'unseen_per_client': canaries,
                   'confidence': CONFIDENCE},
      'empirical_epsilon': client_estimates(scores, plans, spent, steps_seen,
                                            delta, num_params),
  }

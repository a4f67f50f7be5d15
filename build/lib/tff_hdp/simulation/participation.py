"""Who takes part when devices enforce their own participation.

Without sampling (`tff_hdp.privacy.min_separation`), the guarantee rests on
each device keeping its group's model: at most k_j participations, any two
at least b_j rounds apart. Simulation plays the devices' side: every round,
each device that its own rule allows checks in, and the server takes
`clients_per_round` of them at random. Nothing here is a privacy assumption
(the server's choice may be anything); what the accountant relies on is that
no device breaks its model, which `check_schedule` verifies on any schedule,
and a schedule that would break it is refused, not accounted.

The schedule is a function of the seed alone, so a resumed run replays it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tff_hdp.privacy import min_separation


class ParticipationError(ValueError):
  """A schedule breaks a device's participation model, or cannot be met."""


def _check_models(models: Sequence[min_separation.MinSeparation]) -> int:
  rounds = {m.rounds for m in models}
  if len(rounds) != 1:
    raise ParticipationError('every group\'s participation model must span '
                             f'the same rounds; got {sorted(rounds)}.')
  return rounds.pop()


def schedule_rounds(client_groups: np.ndarray,
                    models: Sequence[min_separation.MinSeparation],
                    clients_per_round: int, seed: int) -> list[np.ndarray]:
  """Each round's clients (indices into `client_groups`, sorted).

  Args:
    client_groups: each client's group (an index into `models`).
    models: each group's participation model (the same number of rounds).
    clients_per_round: how many of the devices that may check in a round
      takes.
    seed: the draw of which eligible devices a round takes.

  Raises:
    ParticipationError: a round has fewer eligible devices than it takes.
  """
  groups = np.asarray(client_groups)
  rounds = _check_models(models)
  separation = np.array([m.min_separation for m in models])[groups]
  cap = np.array([m.max_participations for m in models])[groups]
  last = np.full(groups.size, -np.iinfo(np.int64).max // 2)
  count = np.zeros(groups.size, dtype=np.int64)
  rng = np.random.default_rng([seed, 0x5C4E])
  schedule = []
  for t in range(rounds):
    eligible = np.flatnonzero((count < cap) & (t - last >= separation))
    if eligible.size < clients_per_round:
      raise ParticipationError(
          f'round {t + 1} has {eligible.size} devices allowed to take part, '
          f'fewer than --clients_per_round={clients_per_round}: more clients, '
          'a smaller separation or more participations per device would '
          'fill it.')
    chosen = np.sort(rng.choice(eligible, clients_per_round, replace=False))
    last[chosen] = t
    count[chosen] += 1
    schedule.append(chosen)
  check_schedule(schedule, groups, models)
  return schedule


def check_schedule(schedule: Sequence[np.ndarray], client_groups: np.ndarray,
                   models: Sequence[min_separation.MinSeparation]) -> None:
  """Refuses a schedule in which any device breaks its group's model,
  naming the first such device, its group and its rounds (1-based)."""
  groups = np.asarray(client_groups)
  rounds = _check_models(models)
  if len(schedule) > rounds:
    raise ParticipationError(f'the schedule has {len(schedule)} rounds; the '
                             f'participation models cover {rounds}.')
  taken = [[] for _ in range(groups.size)]
  for t, clients in enumerate(schedule):
    for c in np.asarray(clients).tolist():
      taken[c].append(t)
  for c, rounds_of_c in enumerate(taken):
    model = models[groups[c]]
    if not model.allows(rounds_of_c):
      raise ParticipationError(
          f'client {c} (group {groups[c]}) takes part in rounds '
          f'{[t + 1 for t in rounds_of_c]}, which its group\'s model (at '
          f'most {model.max_participations}, at least '
          f'{model.min_separation} rounds apart) does not allow.')

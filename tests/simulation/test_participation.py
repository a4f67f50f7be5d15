"""The participation scheduler keeps every device's model, and the check
refuses schedules that do not."""

import numpy as np
import pytest

from tff_hdp.privacy import min_separation as ms
from tff_hdp.simulation import participation

MODELS = [ms.MinSeparation(60, 10, 3), ms.MinSeparation(60, 4, 6),
          ms.MinSeparation(60, 1, 1)]


def _groups():
  return np.repeat([0, 1, 2], [40, 60, 100])


def test_every_device_keeps_its_groups_model_and_rounds_are_full():
  groups = _groups()
  schedule = participation.schedule_rounds(groups, MODELS, 6, seed=1)
  assert len(schedule) == 60
  assert all(len(r) == 6 == len(set(r.tolist())) for r in schedule)
  # Independently of check_schedule: each client's rounds, pair by pair.
  for c in range(groups.size):
    mine = [t for t, r in enumerate(schedule) if c in r]
    model = MODELS[groups[c]]
    assert len(mine) <= model.max_participations
    assert all(b - a >= model.min_separation for a, b in zip(mine, mine[1:]))
  counts = np.bincount(np.concatenate(schedule), minlength=groups.size)
  assert counts[groups == 2].max() == 1  # capped at one participation


def test_the_schedule_is_the_seeds():
  groups = _groups()
  a = participation.schedule_rounds(groups, MODELS, 6, seed=1)
  b = participation.schedule_rounds(groups, MODELS, 6, seed=1)
  c = participation.schedule_rounds(groups, MODELS, 6, seed=2)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_a_round_that_cannot_be_filled_is_refused():
  with pytest.raises(participation.ParticipationError,
                     match=r'round 2 has 2 devices .* --clients_per_round=3'):
    participation.schedule_rounds(np.zeros(5, dtype=int),
                                  [ms.MinSeparation(10, 5, 2)], 3, seed=0)


@pytest.mark.parametrize('schedule,message', [
    ([[0], [0]], r'client 0 \(group 0\) takes part in rounds \[1, 2\]'),
    ([[1], [], [], [1], [], [], [1]], r'client 1 .* rounds \[1, 4, 7\]'),
])
def test_a_schedule_breaking_a_model_is_refused(schedule, message):
  models = [ms.MinSeparation(8, 3, 2)]
  with pytest.raises(participation.ParticipationError, match=message):
    participation.check_schedule([np.array(r, dtype=int) for r in schedule],
                                 np.zeros(2, dtype=int), models)


def test_models_over_different_rounds_are_refused():
  with pytest.raises(participation.ParticipationError, match='same rounds'):
    participation.schedule_rounds(
        np.array([0, 1]), [ms.MinSeparation(10, 1, 1), ms.MinSeparation(9, 1, 1)],
        1, seed=0)

"""The planner's noise on the mean (`plan.py`'s S/x) is the noise a run
applies: for each rule whose rounds.csv releases its groups' weights and
noise (FedHDP at the noise-aware ratios and at r = 1, DP-FedAvg), the
released mean's noise std read back from it (each group's weight times
its noise std on its mean, per unit of clip norm) equals the planner's
divisor for the same choices, sampling, rounds and clip. rounds.csv holds
6 significant digits, so they are compared to 1e-5. (The one-draw rules
release no per-group noise: tests/learning/test_frontier_sampling.py
measures their factory's noise against the divisor.) Each case trains a
2-round run in this process: what is checked is what a run writes."""

import csv
import math
import os

import pytest

from tff_hdp.privacy import accounting
from tff_hdp.privacy import planner
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import trusted_setting
from tff_hdp.tasks import digits

pytestmark = pytest.mark.tf

LEVELS = [pg.PrivacyGroup('eps1', 1.0, 1e-2),
          pg.PrivacyGroup('eps8', 8.0, 1e-2)]
Q, ROUNDS = 0.5, 2


def _released_divisor(row: dict) -> float:
  """S / the released mean's noise std, per coordinate, from one row."""
  variance = 0.0
  for name in row:
    if name.startswith('noise_std_'):
      group = name[len('noise_std_'):]
      std = float(row[name]) / float(row['clip_norm'])
      variance += (float(row[f'weight_{group}']) * std)**2
  return 1 / math.sqrt(variance)


@pytest.mark.parametrize('rule,ratio', [('fedhdp', None), ('fedhdp', 1.0),
                                        ('dp_fedavg', None)])
def test_the_applied_noise_is_the_planners(rule, ratio, tmp_path):
  task = digits.load(clients_per_digit=4, seed=0)
  choices = trusted_setting.client_choices(task, LEVELS, 0.0, seed=0)
  sampling = accounting.PoissonSampling(Q)
  clip = plans.ClipSettings(initial_norm=0.5, learning_rate=0.0,
                            count_stddev=5.0)
  settings = trusted_setting.Settings(rounds=ROUNDS, sampling=sampling,
                                      clip=clip, eval_every=ROUNDS)
  summary, _ = trusted_setting.run_configuration(
      task, trusted_setting.Configuration(rule, ratio), choices, settings,
      str(tmp_path), progress=False)
  with open(os.path.join(tmp_path, summary['configuration'],
                         'rounds.csv')) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == ROUNDS
  planned = {r.algorithm: r for r in planner.plan_rules(
      choices, sampling, ROUNDS, clip, task.num_trainable_parameters)}
  released, _ = planned['fedhdp --r=1' if ratio == 1.0 else rule].divisors
  for row in rows:
    assert _released_divisor(row) == pytest.approx(released, rel=1e-5)

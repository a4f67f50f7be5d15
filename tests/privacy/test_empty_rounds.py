"""A round in which Poisson sampling picks nobody releases the noise the
ledger accounts for, not an unchanged model.

The ledger composes one Poisson-subsampled Gaussian per round, whoever was
sampled; the release must be that mechanism. Here 20 clients with q = 1/20
leave about a third of the rounds empty (the audit's setting): every round's
model must move, an empty round's by the group's noise alone, with the
per-coordinate spread the row reports, and the epsilon must equal
dp_accounting's composition of the rounds that ran.
"""

import csv
import os

import dp_accounting
import numpy as np
import pytest

from tff_hdp.tasks import digits
from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import trusted_setting

pytestmark = pytest.mark.tf

ROUNDS = 24
EPSILON, DELTA = 3.6, 1e-4


# The tests of one cohort size read its one run: one xdist worker runs them.
@pytest.fixture(scope='module', params=[
    pytest.param(size, id=name,
                 marks=pytest.mark.xdist_group(f'test_empty_rounds_{name}'))
    for size, name in ((0, 'per_client'), (8, 'cohorts'))])
def run(request, tmp_path_factory):
  task = digits.load(clients_per_digit=2, seed=0)  # 20 clients
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', EPSILON, DELTA)], 0.0, seed=0)
  # Realized counts are released here (not covered) to see the empty rounds.
  settings = trusted_setting.Settings(
      rounds=ROUNDS, sampling=accounting.PoissonSampling(1 / 20),
      clip=plans.ClipSettings(initial_norm=0.5, learning_rate=0.0),
      eval_every=ROUNDS, cohort_size=request.param,
      release_unprotected_stats=True,
      # Fixed noise and sampling, so that the statistical checks below are
      # deterministic; with a secret seed they were drawn anew every run.
      unsafe_seeded_dp_randomness=True)
  config = trusted_setting.Configuration('fedhdp', 1.0)
  out = str(tmp_path_factory.mktemp('empty_rounds'))
  models = []
  summary, _ = trusted_setting.run_configuration(
      task, config, choices, settings, out, progress=False,
      on_round=lambda r, w: models.append(
          np.concatenate([np.ravel(x) for x in w.trainable])))
  with open(os.path.join(out, config.name, 'rounds.csv'), newline='') as f:
    rows = [{k: float(v) if v else None for k, v in row.items()}
            for row in csv.DictReader(f)]
  return summary, rows, models


def test_some_rounds_sampled_nobody(run):
  _, rows, _ = run
  empty = [r['round'] for r in rows if r['num_clients'] == 0]
  assert 3 <= len(empty) < ROUNDS, empty


def test_every_round_moves_the_model_empty_ones_by_the_noise_alone(run):
  _, rows, models = run
  assert len(models) == ROUNDS
  for row, before, after in zip(rows[1:], models, models[1:]):
    step = after - before
    assert np.all(np.isfinite(step))
    assert np.any(step != 0), f'round {row["round"]} released no noise'
    if row['num_clients'] == 0:
      assert row['count_p'] == 0
      # Server learning rate 1, one group of weight 1: the step is the
      # group's noisy mean, noise only: N(0, noise_std_p^2) per coordinate.
      assert row['weight_p'] == pytest.approx(1.0)
      expected = row['noise_std_p']
      assert expected > 0
      # 650 coordinates: the sample std is within 4 standard errors (~11%).
      assert np.std(step) == pytest.approx(expected, rel=0.11)
      assert abs(np.mean(step)) < 4 * expected / np.sqrt(step.size)


def test_epsilon_is_the_composition_of_the_rounds_that_ran(run):
  summary, rows, _ = run
  (group,) = [g for g in summary['groups'] if g['name'] == 'p']
  z = group['noise_multiplier']
  accountant = dp_accounting.rdp.RdpAccountant()
  accountant.compose(dp_accounting.PoissonSampledDpEvent(
      1 / 20, dp_accounting.GaussianDpEvent(z)), ROUNDS)
  expected = accountant.get_epsilon(DELTA)
  assert group['epsilon_spent'] == pytest.approx(expected, rel=1e-9)
  assert expected <= EPSILON
  assert rows[-1]['epsilon_p'] == pytest.approx(expected, rel=1e-5)

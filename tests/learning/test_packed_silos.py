"""Packed silos (`--cohort_size` in the cross-silo setting) run the per-silo
process: every silo keeps its own examples, DP-SGD batches and noise (its own
seed), personal model, private cluster choice and epsilon, so the rounds of
each method match the one-silo-per-TFF-client rounds silo by silo; only the
order of the server's floating-point sums differs. Silos of different sizes
and packs of unequal size exercise the padding."""

import numpy as np
import pytest

from tests.simulation.test_cross_silo_setting import _clustered_task
from tests.simulation.test_cross_silo_setting import _settings
from tff_hdp.learning import cross_silo_process
from tff_hdp.privacy import dp_randomness
from tff_hdp.simulation import cross_silo_setting as cse

pytestmark = pytest.mark.tf

ROUNDS = 4


@pytest.fixture(scope='module')
def task():
  task = _clustered_task(num_silos=7)
  for k, size in enumerate((120, 37, 80, 1, 64, 120, 9)):
    x, y = task.client_train[f'silo{k}']
    task.client_train[f'silo{k}'] = (x[:size], y[:size])
  return task


def _rounds(task, name: str, cohort_size: int):
  """The program after ROUNDS rounds, and each round's measurements."""
  settings = _settings(rounds=ROUNDS, cohort_size=cohort_size)
  algorithm = cse.algorithm_record(name)
  program = cse.CrossSiloRounds(
      task, algorithm, settings, cse.build_process(task, algorithm, settings),
      cse.plan_silos(task, algorithm, settings),
      dp_randomness.client_seeds(settings.seed, True, len(task.client_ids)),
      label=name)
  rows = [program.train(r) for r in range(1, ROUNDS + 1)]
  return program, rows


@pytest.mark.parametrize('name', ['mrmtl', 'ditto', 'ifca_mrmtl', 'fedavg'])
def test_packed_silos_equal_one_silo_per_tff_client(task, name):
  one, one_rows = _rounds(task, name, cohort_size=0)
  packed, packed_rows = _rounds(task, name, cohort_size=3)  # packs 3, 2, 2
  assert packed_rows == one_rows  # non-finite counts, cluster sizes
  np.testing.assert_array_equal(packed.clusters, one.clusters)
  for c in task.client_ids:
    assert c in packed.personal and c in one.personal
    for a, b in zip(packed.personal.get(c, ()), one.personal.get(c, ())):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for g in range(_settings().num_clusters if 'ifca' in name else 1):
    for a, b in zip(cross_silo_process.cluster_weights(packed.state, g).trainable,
                    cross_silo_process.cluster_weights(one.state, g).trainable):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The training did move the models (the comparison is not of two zeros).
  assert not np.allclose(packed.personal.get('silo0', ())[0],
                         packed.personal.get('silo1', ())[0])


def test_a_packed_run_reports_what_a_per_silo_run_reports(task):
  settings = _settings(rounds=ROUNDS, checkpoint_every=0)
  one = cse.run_algorithm(task, 'ifca', settings, None, progress=False)
  packed = cse.run_algorithm(
      task, 'ifca', cse.dataclasses.replace(settings, cohort_size=4), None,
      progress=False)
  assert packed['final_clusters'] == one['final_clusters']
  assert packed['metric'] == pytest.approx(one['metric'], abs=1e-9)
  assert packed['silos'] == one['silos']  # plans and epsilon spent

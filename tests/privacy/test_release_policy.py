"""Everything a default FedHDP run releases is covered by its printed epsilon.

The test holds its own list of what may be released and why; every column of
`rounds.csv`, every TensorBoard tag and every metric of `summary.json` that a
default run writes must be on it. Statistics of private clients without noise
appear only with `release_unprotected_stats`, which the summary announces.
"""

import csv
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import digits
from tff_hdp.privacy import plans
from tff_hdp.privacy import accounting
from tff_hdp.simulation import trusted_setting
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.privacy import release_policy
from tff_hdp.reporting import tables
from tff_hdp.aggregators import heterogeneous_dp

# What a run may release for groups 'p' (private) and 'opt_out', and why the
# printed epsilon covers it.
COVERED = {
    'round': 'public',
    'clip_norm': 'post-processing of the accounted noisy clip count',
    'fraction_clipped_estimate': 'the accounted noisy clip count itself',
    'count_opt_out': 'opt-out clients chose no guarantee; under Poisson '
                     'sampling their count does not depend on private ones',
    'weight_p': 'r_j times public expected sizes and the opt-out count',
    'weight_opt_out': 'as weight_p',
    'noise_std_p': 'z_j S / (q N_j): public constants and the clip norm',
    'noise_std_opt_out': 'zero',
    'epsilon_p': 'the accountant, a function of public settings',
    'epsilon_opt_out': 'infinite: not released as a number',
    'acc_g': 'the DP model on the server test set (evaluation data)',
    'acc_g_np': 'the DP model on opt-out clients\' data',
    'var_g_np': 'as acc_g_np',
    'acc_l_np': 'opt-out clients\' personal models on their own data',
    'var_l_np': 'as acc_l_np',
}
NOT_COVERED = {'num_clients', 'count_p', 'train_loss', 'train_accuracy',
               'num_non_finite_updates', 'acc_g_p', 'var_g_p', 'delta_g'}


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=3, seed=0)


def _run(task, out, clip_lr=0.2, denominator='expected', **flags):
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-4)], 0.2, seed=0)
  settings = trusted_setting.Settings(
      rounds=2, sampling=accounting.PoissonSampling(0.5),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0,
                               learning_rate=clip_lr),
      denominator=denominator, eval_every=1, **flags)
  config = trusted_setting.Configuration('fedhdp', 0.5)
  tensorboard = os.path.join(out, 'tensorboard')
  summary, _ = trusted_setting.run_configuration(
      task, config, choices, settings, out, progress=False,
      release_managers=[tff.program.TensorBoardReleaseManager(tensorboard)])
  with open(os.path.join(out, config.name, 'rounds.csv')) as f:
    rows = list(csv.DictReader(f))
  with open(os.path.join(out, config.name, 'summary.json')) as f:
    assert json.load(f) == json.loads(json.dumps(summary).replace(
        'Infinity', 'null'))
  tags = set()
  for path in glob.glob(os.path.join(tensorboard, '*tfevents*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags |= {v.tag for v in event.summary.value}
  return summary, rows, tags


def test_a_default_run_releases_only_what_epsilon_covers(task, tmp_path):
  summary, rows, tags = _run(task, str(tmp_path))
  columns = set(rows[0])
  assert columns <= set(COVERED), columns - set(COVERED)
  assert tags <= set(COVERED), tags - set(COVERED)
  assert set(summary['metrics']) <= set(COVERED)
  assert not (columns | tags | set(summary['metrics'])) & NOT_COVERED
  # What is released is really there.
  assert {'clip_norm', 'count_opt_out', 'epsilon_p', 'acc_g',
          'acc_g_np'} <= columns
  assert {'clip_norm', 'epsilon_p', 'acc_g'} <= tags
  assert summary['privacy_warnings'] == []
  assert summary['privacy_accounted'] and summary['sampling'] == 'poisson'
  assert summary['denominator'] == 'expected'
  assert summary['adjacency'] == 'add or remove one client'


def test_a_fixed_clip_norm_withholds_the_exact_clipped_fraction(task, tmp_path):
  _, rows, tags = _run(task, str(tmp_path), clip_lr=0.0)
  assert 'fraction_clipped_estimate' not in set(rows[0]) | tags
  assert release_policy.withheld_columns(
      [pg.PrivacyGroup('p', 1.0, 1e-5)], adaptive_clipping=True) >= {
          'count_p', 'num_clients', 'train_loss', 'acc_g_p', 'acc_l_p'}


def test_unprotected_statistics_need_the_flag_and_are_announced(task,
                                                                tmp_path):
  summary, rows, tags = _run(task, str(tmp_path),
                             release_unprotected_stats=True)
  assert NOT_COVERED - {'train_accuracy'} <= set(rows[0])
  assert {'count_p', 'num_clients', 'train_loss'} <= tags
  assert 'acc_g_p' in summary['metrics']
  assert summary['privacy_warnings'] == [release_policy.UNPROTECTED_WARNING]


def test_realized_denominators_report_no_epsilon(task, tmp_path):
  summary, rows, tags = _run(task, str(tmp_path), denominator='realized')
  assert not summary['privacy_accounted']
  assert summary['groups'][0]['epsilon_spent'] is None
  assert all(r['epsilon_p'] == '' for r in rows)
  assert 'epsilon_p' not in tags
  assert summary['privacy_warnings'] == [release_policy.REALIZED_WARNING]
  _, table = tables.results_table([summary])
  assert 'p: not accounted (realized denominator)' in table[0][-3]
  assert table[0][-2] == 'poisson, realized'


def test_realized_denominators_depend_on_a_zero_update_client():
  """Why realized mode is not accounted: one more private client whose
  update is exactly zero rescales the group's mean (6 clients -> 7)."""
  factory = heterogeneous_dp.HeterogeneousDPFactory(
      [0.0], [1.0], [None], initial_clip_norm=100.0, clip_learning_rate=0.0)
  process = factory.create(tff.TensorType(np.float32, [1]),
                           tff.TensorType(np.float32, [1]))
  ones = [[1.0]] * 6
  state = process.initialize()
  six = process.next(state, ones, [[1.0]] * 6).result
  seven = process.next(state, ones + [[0.0]], [[1.0]] * 7).result
  assert seven[0] == pytest.approx(six[0] * 6 / 7)

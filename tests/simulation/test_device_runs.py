"""Runs without sampling (--sampling=device): per-group BLT and tree streams
from the command line, each group's printed epsilon against an independent
oracle (every participation pattern of the dense strategy, the Gaussian's
exact curve), every round full, and what cannot run refused in one line.

The runs are in this process (`repository.run_program`): the claims are on
what they compute and write."""

import json
import math
import os
import sys

import numpy as np
import pytest
from scipy import optimize
from scipy import stats

from tests import pinned_runs
from tests import repository
from tests.privacy import strategy_oracles as oracles
from tff_hdp.privacy import blt
from tff_hdp.privacy import min_separation as ms

pytestmark = pytest.mark.tf
# The tests that share the module's `run`: one xdist worker trains it (the
# others, each with runs of its own, go wherever a worker is free).
_RUN = pytest.mark.xdist_group('test_device_runs')

ROUNDS, B, K, PER_ROUND = 6, 2, 3, 20
FLAGS = ['--task=digits', '--epsilons=1,8', '--deltas=1e-6',
         '--opt_out_fraction=0.1', '--sampling=device',
         f'--min_separation={B}', f'--max_participations={K}',
         f'--rounds={ROUNDS}', f'--clients_per_round={PER_ROUND}',
         '--clip_lr=0', '--eval_every=3', '--checkpoint_every=0',
         '--release_unprotected_stats']


def _oracle_epsilon(sensitivity_squared, noise_multiplier, delta):
  mu = math.sqrt(sensitivity_squared) / noise_multiplier

  def excess(eps):
    return (stats.norm.cdf(-eps / mu + mu / 2) -
            math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta)

  return optimize.brentq(excess, 0.0, 100.0, xtol=1e-13, rtol=1e-13)


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('device'))
  result = repository.run_program(
      'run_experiment.py', *FLAGS,
      '--algorithms=fedhdp_blt,fedhdp_tree,blt_shared',
      '--level_participations=1,3', f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  return out, result


@_RUN
@pytest.mark.parametrize('configuration', ['fedhdp_blt', 'fedhdp_tree'])
def test_each_groups_epsilon_is_the_oracles(run, configuration):
  out, _ = run
  with open(os.path.join(out, configuration, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['sampling'] == 'device'
  assert summary['adjacency'].startswith('zero out one device')
  assert summary['participation'] == {
      'min_separation': B, 'max_participations': K,
      'noise': 'ToeplitzNoise' if configuration == 'fedhdp_blt'
               else 'TreeNoise'}
  model = ms.MinSeparation(ROUNDS, B, K)
  if configuration == 'fedhdp_blt':
    matrix = oracles.toeplitz_matrix(
        blt.parameters_for(model).coefficients(ROUNDS))
  else:
    matrix = oracles.tree_strategy_matrix(ROUNDS)
  sensitivity2 = oracles.brute_force_sensitivity_squared(matrix, model)
  private = [g for g in summary['groups'] if g['target_epsilon'] is not None]
  assert [g['target_epsilon'] for g in private] == [1.0, 8.0]
  for group in private:
    oracle = _oracle_epsilon(sensitivity2, group['noise_multiplier'], 1e-6)
    assert group['epsilon_spent'] == pytest.approx(oracle, abs=1e-6)
    assert group['epsilon_spent'] == pytest.approx(group['target_epsilon'],
                                                   abs=1e-6)


@_RUN
def test_every_round_takes_its_clients_and_the_table_says_device(run):
  out, result = run
  for configuration in ('fedhdp_blt', 'fedhdp_tree', 'blt_shared'):
    rows = repository.rounds_rows(out, configuration)
    assert [int(r['num_clients']) for r in rows] == [PER_ROUND] * ROUNDS
  assert f'{PER_ROUND} clients per round (device)' in result.stdout


@_RUN
def test_canaries_take_part_as_devices_and_leave_the_accounting(run,
                                                               tmp_path):
  """An audit run (in cohorts): its canaries are devices of their groups,
  scheduled among the others (every round still takes exactly its
  clients), each private group gets its estimate from 10 inserted against
  10 unseen canaries, and the noise and epsilon are the plain run's (a
  device's accounting rests on its own participations)."""
  plain, _ = run
  out = str(tmp_path / 'audit')
  result = repository.run_program(
      'run_experiment.py', *FLAGS, '--algorithms=fedhdp_blt',
      '--canaries=10', '--cohort_size=8', f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'sampled or scheduled' in result.stdout
  rows = repository.rounds_rows(out, 'fedhdp_blt')
  assert [int(r['num_clients']) for r in rows] == [PER_ROUND] * ROUNDS
  summaries = []
  for folder in (plain, out):
    with open(os.path.join(folder, 'fedhdp_blt', 'summary.json')) as f:
      summaries.append(json.load(f))
  without, audit = ([g for g in s['groups'] if g['target_epsilon']]
                    for s in summaries)
  assert [g['name'] for g in audit] == [g['name'] for g in without]
  for plain_group, group in zip(without, audit):
    assert group['noise_multiplier'] == plain_group['noise_multiplier']
    assert group['epsilon_spent'] == plain_group['epsilon_spent']
    for scores in group['empirical_epsilon'].values():
      assert (scores['inserted'], scores['unseen']) == (10, 10)
      assert np.isfinite(scores['estimate'])


def _refusal(output_dir, *flags) -> str:
  """The one line a refused run ends with (exit status 2)."""
  result = repository.run_program('run_experiment.py', *flags,
                                  f'--output_dir={output_dir}')
  assert result.returncode == 2, result.stderr[-2000:]
  return result.stderr.strip().splitlines()[-1]


def test_a_round_no_device_may_fill_is_one_line(tmp_path):
  """100 digits clients, each once (k = 1): the sixth round of 20 finds
  none left."""
  flags = [f for f in FLAGS if not f.startswith('--max_participations')]
  last = _refusal(tmp_path, *flags, '--max_participations=1',
                  '--opt_out_fraction=0', '--algorithms=fedhdp_blt')
  assert 'fewer than --clients_per_round=20' in last, last


def test_correlated_noise_with_sampling_is_refused(tmp_path):
  last = _refusal(tmp_path, '--task=digits', '--algorithms=fedhdp_blt',
                  '--rounds=2', '--clip_lr=0')
  assert '--sampling=device' in last, last


@_RUN
def test_the_blt_streams_add_the_strategys_noise_to_every_round(run):
  """rounds.csv's noise std per group is z_j clip / D_j, with D_j the
  group's share of the round (public)."""
  out, _ = run
  with open(os.path.join(out, 'fedhdp_blt', 'summary.json')) as f:
    summary = json.load(f)
  rows = repository.rounds_rows(out, 'fedhdp_blt')
  for group in summary['groups']:
    if group['target_epsilon'] is None:
      continue
    expected = PER_ROUND * group['clients'] / 100
    want = group['noise_multiplier'] * 0.5 / expected  # --clip_norm 0.5
    got = np.array([float(r[f'noise_std_{group["name"]}']) for r in rows])
    np.testing.assert_allclose(got, want, rtol=1e-5)


@_RUN
def test_one_stream_accounts_each_level_at_its_own_cap(run):
  """blt_shared, eps 1 devices capped at 1 participation and eps 8 ones at
  3: one noise multiplier, the least that meets both targets, and each
  group's epsilon the oracle's at its own cap."""
  out, _ = run
  with open(os.path.join(out, 'blt_shared', 'summary.json')) as f:
    summary = json.load(f)
  private = [g for g in summary['groups'] if g['target_epsilon'] is not None]
  assert [g['max_participations'] for g in private] == [1, 3]
  z = {g['noise_multiplier'] for g in private}
  assert len(z) == 1
  z = z.pop()
  c = blt.parameters_for(ms.MinSeparation(ROUNDS, B, K)).coefficients(ROUNDS)
  spent = []
  for group in private:
    model = ms.MinSeparation(ROUNDS, B, group['max_participations'])
    sensitivity2 = oracles.brute_force_sensitivity_squared(
        oracles.toeplitz_matrix(c), model)
    oracle = _oracle_epsilon(sensitivity2, z, 1e-6)
    assert group['epsilon_spent'] == pytest.approx(oracle, abs=1e-6)
    assert group['epsilon_spent'] <= group['target_epsilon'] + 1e-6
    spent.append(group['epsilon_spent'] / group['target_epsilon'])
  assert max(spent) == pytest.approx(1.0, abs=1e-6)  # the least z


def test_a_levels_cap_is_what_the_schedule_keeps(tmp_path):
  """Every level capped at one participation (the run's cap is 3): 100
  devices fill five rounds of 20, and the sixth is refused."""
  last = _refusal(tmp_path, *FLAGS, '--opt_out_fraction=0',
                  '--algorithms=blt_shared', '--level_participations=1,1')
  assert 'round 6 has 0 devices' in last, last


@pytest.mark.parametrize('configuration', ['fedhdp_blt', 'fedhdp_tree'])
def test_a_killed_stream_run_resumes_to_the_uninterrupted_one(
    tmp_path, configuration):
  """The streams' state (BLT's buffers, the tree's nodes, whose level buffer
  changes size from round to round, also after the resume) survives a
  SIGKILL: killed after its second round (in a process of its own) and
  resumed here, the run writes what an uninterrupted one does; re-run once
  finished, it reports the same run again. Seeded noise, so the two runs
  draw the same."""
  flags = [*FLAGS, '--rounds=4', '--checkpoint_every=1', '--eval_every=4',
           '--unsafe_seeded_dp_randomness', f'--algorithms={configuration}']
  whole, cut = str(tmp_path / 'whole'), str(tmp_path / 'cut')
  assert repository.run_program('run_experiment.py', *flags,
                                f'--output_dir={whole}').returncode == 0
  command = [sys.executable, os.path.join(repository.ROOT,
                                          'run_experiment.py'),
             *flags, f'--output_dir={cut}']
  assert repository.kill_after_rows(command, cut, configuration, 2) == 2
  want = {k: v for k, v in pinned_runs.collect(whole).items() if k != 'files'}
  for _ in range(2):  # the resume, then a re-run of the finished run
    result = repository.run_program('run_experiment.py', *flags,
                                    f'--output_dir={cut}')
    assert result.returncode == 0, result.stderr[-2000:]
    got = pinned_runs.collect(cut)
    assert {k: v for k, v in got.items() if k != 'files'} == want

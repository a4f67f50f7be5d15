"""An untrusted-server run killed with SIGKILL and re-run equals an
uninterrupted one.

Robust-HDP with its weights frozen after round 2 keeps state of its own
in the aggregator (the frozen weights, the round), which must survive the
kill with the model and the clients' DP-SGD round counter. The clients'
noise and sampling follow a secret seed that only the checkpoint keeps: the
killed run gets the uninterrupted run's secret by planting its secret file in
the killed run's checkpoint folder before it starts. An audit run
(`--canaries`) also keeps its clients' canary sums in the state, so its
estimates survive the kill.

Only the kill needs a process of its own; the other runs are what they write,
and run in this process (`repository.run_program`).
"""

import dataclasses
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from tff_hdp import tasks
from tests import repository
from tff_hdp.federated_task import TaskOptions
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf

ROOT = repository.ROOT
ROUNDS = 4  # frozen after round 2, killed after 3: one round resumes
RULE = 'robust_hdp'
FLAGS = ['--task=digits', '--num_clients=10', f'--algorithms={RULE}',
         '--rpca_freeze_after_round=2', f'--rounds={ROUNDS}',
         '--epsilon_distribution=uniform', '--eval_every=3',
         '--checkpoint_every=1', '--seed=3']


def _command(output_dir, *extra):
  return [sys.executable, os.path.join(ROOT, 'run_experiment.py'), *FLAGS,
          f'--output_dir={output_dir}', *extra]


def _finish(output_dir, *extra):
  """The run in this process."""
  return repository.run_program('run_experiment.py', *FLAGS,
                                f'--output_dir={output_dir}', *extra)


def _rows(output_dir):
  return repository.rounds_rows(output_dir, RULE)


def _summary(output_dir):
  with open(os.path.join(output_dir, RULE, 'summary.json')) as f:
    return json.load(f)


def _final_state(output_dir):
  """Every array of the last round's saved process state, in order."""
  path = os.path.join(output_dir, RULE, 'checkpoints', f'round_{ROUNDS}')
  return [np.asarray(v) for v in tf.nest.flatten(tf.saved_model.load(path)())]


@pytest.mark.parametrize('audit', [(), ('--canaries=20',)],
                         ids=['plain', 'canaries'])
def test_kill_and_resume_is_bitwise_equal_to_uninterrupted(tmp_path, audit):
  """The uninterrupted run first (here), then the killed run with its secret
  (the same noise as the other way round): SIGKILLed in a process of its
  own, resumed and re-run here, where the resume reads only its folder."""
  whole, resumed = str(tmp_path / 'whole'), str(tmp_path / 'resumed')
  assert _finish(whole, *audit).returncode == 0
  repository.plant_secret(whole, resumed, RULE)

  # After the freeze (round 2): the frozen weights are in the killed state.
  killed_at = repository.kill_after_rows(_command(resumed, *audit), resumed,
                                         RULE, 3)
  assert 3 <= killed_at < ROUNDS, 'the kill must land mid-run'

  result = _finish(resumed, *audit)
  assert result.returncode == 0, result.stderr[-2000:]
  assert f'{RULE} rounds: resuming from round ' in result.stdout
  rows = _rows(resumed)
  assert [int(r['round']) for r in rows] == list(range(1, ROUNDS + 1))
  assert rows == _rows(whole)
  assert [r['weights_frozen'] for r in rows] == ['0', '0'] + ['1'] * (
      ROUNDS - 2)
  a, b = _final_state(whole), _final_state(resumed)
  assert len(a) == len(b) > 4  # model, optimizer, clients' and RPCA's state
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  if audit:
    assert _summary(whole)['empirical_epsilon'] == _summary(resumed)[
        'empirical_epsilon']
    assert len(_summary(whole)['empirical_epsilon']['clients']) == 10
  # A finished run re-run trains nothing and keeps its rows.
  result = _finish(resumed, *audit)
  assert f'{RULE} rounds: resuming from round {ROUNDS}' in result.stdout
  assert _rows(resumed) == rows


def test_a_rerun_with_another_setting_is_refused(tmp_path):
  """Both runs in this process: the refusal reads the folder's run key."""
  out = str(tmp_path)
  assert _finish(out, '--rounds=2', '--checkpoint_every=0').returncode == 0
  # Without saved rounds the key still holds the folder for its run.
  assert not any(name.startswith('round_') for name in
                 os.listdir(os.path.join(out, RULE, 'checkpoints')))
  result = _finish(out, '--rounds=2', '--dp_sgd_clip=0.5')
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert 'holds a checkpoint of a different run (differs in: clip_norm)' in last


def test_a_prefix_run_is_the_start_of_the_whole_run(tmp_path):
  """`train_rounds=k` (how a figure chooses its learning rates) trains rounds
  1..k of the whole run, at the noise calibrated for all its rounds, and
  reports what those k rounds spent; it is not the whole run's result."""
  task = tasks.load('digits', TaskOptions(num_clients=10, seed=3))
  whole = untrusted_setting.UntrustedSettings(
      rounds=4, epsilon_distribution='uniform', eval_every=1,
      checkpoint_every=1, seed=3)
  prefix = dataclasses.replace(whole, train_rounds=2)
  first, full = str(tmp_path / 'prefix'), str(tmp_path / 'whole')
  start = untrusted_setting.run_algorithm(task, 'weiavg', prefix, first,
                                          progress=False)
  repository.plant_secret(first, full, 'weiavg')
  end = untrusted_setting.run_algorithm(task, 'weiavg', whole, full,
                                        progress=False)
  assert repository.rounds_rows(first, 'weiavg') == (
      repository.rounds_rows(full, 'weiavg')[:2])
  assert start['rounds'] == 2 and end['rounds'] == 4
  assert start['target_epsilons'] == end['target_epsilons']
  assert start['epsilon_spent_max'] < end['epsilon_spent_max']
  # Nor is it taken for the whole run: its key says it stopped early.
  with pytest.raises(checkpointing.CheckpointError,
                     match='differs in: train_rounds'):
    untrusted_setting.completed_summary(task, 'weiavg', whole, first)
  with pytest.raises(ValueError, match=r'train_rounds must be in \[1, 4\]'):
    dataclasses.replace(whole, train_rounds=5)

"""A run's private state stays private and is fixed before anything is
released.

The checkpoint folder holds the DP secret (also inside the aggregator's saved
state) and Ditto's noise-free personal models: every folder and file in it
must be its owner's alone, and no released file may hold the secret. The
secret is written before round 1, so a run killed before its first
checkpoint, re-run, releases rounds 1..k again with the same values (not a
second, independent noisy copy), and TensorBoard keeps one event per round,
also when its events were cut short.
Without checkpoints (`--checkpoint_every=0`) the run key is kept all the
same, so a different run into the folder is refused.
"""

import asyncio
import glob
import os
import stat
import struct
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

from tff_hdp.tasks import digits
from tests import repository
from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.simulation import run_files
from tff_hdp.simulation import trusted_setting

pytestmark = pytest.mark.tf

ROOT = repository.ROOT
CONFIG = 'fedhdp_r0.5'


def _run_experiment(output_dir, *flags):
  """The run in this process (`repository.run_program`): the claims on it
  are what it writes, and with which modes, not the process."""
  return repository.run_program(
      'run_experiment.py', '--algorithms=fedhdp', '--r=0.5',
      '--clients_per_round=20', '--clip_count_stddev=3', '--seed=3',
      f'--output_dir={output_dir}', *flags)


def _secret(output_dir):
  with open(os.path.join(output_dir, CONFIG, 'checkpoints',
                         'dp_secret_seed')) as f:
    return int(f.read())


def test_checkpoint_files_are_owner_only_and_no_release_holds_the_secret(
    tmp_path):
  out = str(tmp_path)
  result = _run_experiment(out, '--rounds=2', '--checkpoint_every=1',
                           '--eval_every=2', '--ditto_lambda_p=0.1',
                           '--ditto_lambda_np=0.1')
  assert result.returncode == 0, result.stderr[-2000:]
  checkpoints = os.path.join(out, CONFIG, 'checkpoints')
  listed = []
  for root, dirs, files in os.walk(checkpoints):
    for name in [root] + [os.path.join(root, f) for f in files]:
      mode = stat.S_IMODE(os.stat(name).st_mode)
      assert mode & 0o077 == 0, f'{name} has mode {oct(mode)}'
      listed.append(name)
  names = {os.path.basename(p) for p in listed}
  assert {'dp_secret_seed', 'run_key.json', 'personal_round_2.npz'} <= names
  assert any(p.endswith('.pb') or 'variables' in p for p in listed), listed

  secret = _secret(out)
  patterns = [str(secret).encode(), struct.pack('<q', secret),
              struct.pack('>q', secret)]
  released = [p for p in glob.glob(os.path.join(out, '**'), recursive=True)
              if os.path.isfile(p) and not p.startswith(checkpoints)]
  assert any(p.endswith('rounds.csv') for p in released)
  assert any(p.endswith('final_model.npz') for p in released)
  for path in released:
    with open(path, 'rb') as f:
      content = f.read()
    for pattern in patterns:
      assert pattern not in content, f'{path} holds the secret'


def train_with_tensorboard(out):
  """A run of 4 rounds into `out`, with TensorBoard events and no checkpoint
  before its end."""
  task = digits.load(clients_per_digit=3, seed=0)
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 4.0, 1e-4)], 0.2, seed=0)
  settings = trusted_setting.Settings(
      rounds=4, sampling=accounting.PoissonSampling(0.3),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=3.0),
      eval_every=1, checkpoint_every=100)
  trusted_setting.run_configuration(
      task, trusted_setting.Configuration('fedhdp', 0.5), choices, settings,
      out, progress=False,
      release_managers=[run_files.TensorBoardRounds(out + '/tensorboard')])


# The run in a process of its own, with a local worker that ends with it.
_TRAIN_IN_A_PROCESS = textwrap.dedent('''
    import sys
    from tff_hdp.simulation import runtime
    from tests.simulation import test_private_state
    runtime.init()
    test_private_state.train_with_tensorboard(sys.argv[1])
''')


def _command_to_train(out):
  return [sys.executable, '-c', _TRAIN_IN_A_PROCESS, out]


def _events(directory):
  """{(tag, step): [values]} of every scalar event in `directory`."""
  found = {}
  for path in glob.glob(os.path.join(directory, '*tfevents*')):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        number = float(tf.make_ndarray(value.tensor)) if value.HasField(
            'tensor') else value.simple_value
        found.setdefault((value.tag, event.step), []).append(number)
  return found


def test_a_run_killed_before_its_first_checkpoint_repeats_its_rounds(
    tmp_path):
  out = str(tmp_path / 'out')
  log = open(os.path.join(str(tmp_path), 'train.log'), 'ab')
  repository.kill_after_rows(_command_to_train(out), out, CONFIG, 2,
                             cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
  killed = repository.rounds_rows(out, CONFIG)
  assert 2 <= len(killed) < 4, 'the kill must land mid-run'
  assert not glob.glob(os.path.join(out, CONFIG, 'checkpoints', 'round_*'))
  secret = _secret(out)  # written before round 1
  before = _events(os.path.join(out, 'tensorboard'))
  assert before

  train_with_tensorboard(out)  # re-run in this process: it reads the folder
  assert _secret(out) == secret
  rows = repository.rounds_rows(out, CONFIG)
  assert [int(r['round']) for r in rows] == list(range(1, 5))
  assert rows[:len(killed)] == killed  # the same release, not a second one
  after = _events(os.path.join(out, 'tensorboard'))
  for (tag, step), values in after.items():
    assert len(values) == 1, f'{tag} at round {step} released twice'
  assert {step for _, step in after} == set(range(1, 5))
  for key, values in before.items():
    assert after[key] == values[:1], key
  # What TensorBoard shows is what rounds.csv says.
  assert float(rows[2]['clip_norm']) == float(
      f"{after[('clip_norm', 3)][0]:.6g}")


def test_events_cut_short_give_their_intact_rounds_to_the_resume(tmp_path):
  # A full disk or a kill can cut the last event short; reading it failed
  # every later resume.
  directory = str(tmp_path / 'tensorboard')
  released = run_files.TensorBoardRounds(directory)
  for round_num in range(1, 5):
    asyncio.run(released.release({'clip_norm': float(round_num)}, round_num))
  [path] = glob.glob(os.path.join(directory, '*tfevents*'))
  os.truncate(path, os.path.getsize(path) - 3)  # round 4's event
  run_files.TensorBoardRounds(directory).keep_through(3)
  assert _events(directory) == {('clip_norm', r): [float(r)] for r in (1, 2, 3)}


def test_without_checkpoints_the_run_key_still_guards_the_folder(tmp_path):
  out = str(tmp_path)
  first = _run_experiment(out, '--rounds=2', '--checkpoint_every=0')
  assert first.returncode == 0, first.stderr[-2000:]
  rows = repository.rounds_rows(out, CONFIG)
  with open(os.path.join(out, CONFIG, 'summary.json')) as f:
    summary = f.read()
  second = _run_experiment(out, '--rounds=2', '--checkpoint_every=0',
                           '--batch_size=32')
  assert second.returncode == 2, second.stderr[-2000:]
  last = second.stderr.strip().splitlines()[-1]
  assert 'holds a checkpoint of a different run (differs in: batch_size)' in (
      last)
  assert repository.rounds_rows(out, CONFIG) == rows
  with open(os.path.join(out, CONFIG, 'summary.json')) as f:
    assert f.read() == summary
  assert not glob.glob(os.path.join(out, CONFIG, 'checkpoints', 'round_*'))


def test_the_secret_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
  """A kill between creating the secret file and renaming it into place
  leaves no secret (the next run draws one and starts), never an empty file
  that stops every later run; the file's bytes reach the disk first."""
  from tff_hdp.simulation import checkpointing  # pylint: disable=g-import-not-at-top
  directory = str(tmp_path / 'checkpoints')
  synced, real_replace = [], os.replace

  def killed(src, dst):
    if dst.endswith('dp_secret_seed'):
      raise KeyboardInterrupt  # the process dies here
    real_replace(src, dst)

  real_fsync = os.fsync

  def fsync(fd):
    synced.append(os.readlink(f'/proc/self/fd/{fd}'))
    real_fsync(fd)

  monkeypatch.setattr(os, 'fsync', fsync)
  monkeypatch.setattr(os, 'replace', killed)
  first = checkpointing.RunCheckpoint(directory, {'run': 1})
  try:
    first.dp_secret(lambda: 12345)
  except KeyboardInterrupt:
    pass
  assert not os.path.exists(os.path.join(directory, 'dp_secret_seed'))
  assert os.path.join(directory, 'dp_secret_seed.tmp') in synced
  monkeypatch.setattr(os, 'replace', real_replace)
  again = checkpointing.RunCheckpoint(directory, {'run': 1})
  assert again.dp_secret(lambda: 678) == 678
  assert checkpointing.RunCheckpoint(directory, {'run': 1}).dp_secret(
      lambda: 9) == 678
  mode = os.stat(os.path.join(directory, 'dp_secret_seed')).st_mode
  assert stat.S_IMODE(mode) == 0o600

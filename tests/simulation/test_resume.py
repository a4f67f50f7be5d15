"""Killing a run with SIGKILL and re-running it equals an uninterrupted run.

The runs use Ditto, so the clients' personal models are part of what must
survive the kill. Their DP noise and sampling come from a secret seed that
only the checkpoint keeps: the killed run is given the uninterrupted run's
secret by planting its secret file in the killed run's checkpoint folder
before it starts.

The uninterrupted run is trained once, in this process (`whole`): the claims
are what runs write, not which process wrote them; only the kill needs a
process of its own. Tests that change its folder change a copy.
"""

import os
import shutil
import sys

import numpy as np
import pytest

from tests import repository

pytestmark = pytest.mark.tf
# The tests that share the module's `whole` run: one xdist worker trains it.
_WHOLE = pytest.mark.xdist_group('test_resume_whole')

ROOT = repository.ROOT
ROUNDS = 4  # killed after round 3 (a checkpoint, an evaluation): one resumes
FLAGS = ['--algorithms=fedhdp', '--r=0.5', f'--rounds={ROUNDS}',
         '--clients_per_round=20', '--clip_count_stddev=3', '--eval_every=3',
         '--checkpoint_every=1', '--seed=3', '--ditto_lambda_p=0.1',
         '--ditto_lambda_np=0.02']


def _command(output_dir, *extra):
  return [sys.executable, os.path.join(ROOT, 'run_experiment.py'), *FLAGS,
          f'--output_dir={output_dir}', *extra]


def _rows(output_dir):
  return repository.rounds_rows(output_dir, 'fedhdp_r0.5')


def _finish(output_dir, *extra):
  """The run in this process (`repository.run_program`)."""
  return repository.run_program('run_experiment.py', *FLAGS,
                                f'--output_dir={output_dir}', *extra)


def _final_model(output_dir):
  return np.load(os.path.join(output_dir, 'fedhdp_r0.5', 'final_model.npz'))


@pytest.fixture(scope='module')
def whole(tmp_path_factory):
  """The uninterrupted run's folder, trained once for the module's tests."""
  out = str(tmp_path_factory.mktemp('whole') / 'out')
  result = _finish(out)
  assert result.returncode == 0, result.stderr[-2000:]
  return out


def _copy(whole, tmp_path):
  """A copy of the finished `whole` run that a test may change."""
  out = str(tmp_path / 'out')
  shutil.copytree(whole, out)
  return out


@_WHOLE
def test_kill_and_resume_is_bitwise_equal_to_uninterrupted(whole, tmp_path):
  """The killed run starts with `whole`'s secret (the same noise and
  sampling as when `whole` was given the killed run's), is SIGKILLed in a
  process of its own and resumes here: the resume reads only its folder."""
  resumed = str(tmp_path / 'resumed')
  repository.plant_secret(whole, resumed, 'fedhdp_r0.5')

  killed_at = repository.kill_after_rows(_command(resumed), resumed,
                                         'fedhdp_r0.5', 3)
  assert 3 <= killed_at < ROUNDS, 'the kill must land mid-run'

  result = _finish(resumed)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = _rows(resumed)
  assert [int(r['round']) for r in rows] == list(range(1, ROUNDS + 1))
  assert rows == _rows(whole)
  a, b = _final_model(whole), _final_model(resumed)
  assert sorted(a.files) == sorted(b.files)
  for name in a.files:
    np.testing.assert_array_equal(a[name], b[name])
  last = os.path.join('fedhdp_r0.5', 'checkpoints',
                      f'personal_round_{ROUNDS}.npz')
  a, b = np.load(os.path.join(whole, last)), np.load(os.path.join(resumed, last))
  assert len(a.files) > 1 and sorted(a.files) == sorted(b.files)
  for name in a.files:
    np.testing.assert_array_equal(a[name], b[name])
  assert rows[-1]['acc_l_np'] and 'acc_l_p' not in rows[-1]  # withheld


def test_runs_with_identical_flags_draw_different_noise(tmp_path):
  """In this process: each run draws its secret from the OS when it starts,
  in whichever process it runs."""
  first, second = str(tmp_path / 'first'), str(tmp_path / 'second')
  for out in (first, second):
    assert _finish(out, '--rounds=1', '--ditto_lambda_p=0',
                   '--ditto_lambda_np=0').returncode == 0
  a, b = _final_model(first), _final_model(second)
  assert any(not np.array_equal(a[name], b[name]) for name in a.files)
  # --unsafe_seeded_dp_randomness repeats a run exactly, and says so.
  seeded = [str(tmp_path / 'seeded_a'), str(tmp_path / 'seeded_b')]
  for out in seeded:
    result = _finish(out, '--rounds=1', '--unsafe_seeded_dp_randomness')
    assert result.returncode == 0
    assert 'WARNING: --unsafe_seeded_dp_randomness' in result.stdout
  a, b = _final_model(seeded[0]), _final_model(seeded[1])
  for name in a.files:
    np.testing.assert_array_equal(a[name], b[name])


@_WHOLE
def test_checkpoint_of_another_configuration_is_refused(whole, tmp_path):
  """Into a copy of `whole`: the refusal reads the folder's run key, which
  the copy holds as the run left it."""
  out = _copy(whole, tmp_path)
  result = _finish(out, '--client_lr=0.05', '--ditto_lr=0.1')
  assert result.returncode != 0
  last = result.stderr.strip().splitlines()[-1]
  assert 'holds a checkpoint of a different run (differs in: client_lr)' in last


@_WHOLE
def test_rerun_with_another_batch_size_is_refused(whole, tmp_path):
  """Into a copy of `whole` (see above)."""
  # The batch size lives in the task, not in the training settings: it is
  # in the run key all the same (tests/cli/test_run_key.py covers every flag).
  out = _copy(whole, tmp_path)
  result = _finish(out, '--batch_size=5')
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert 'holds a checkpoint of a different run (differs in: batch_size)' in last


@_WHOLE
def test_unreadable_newest_checkpoint_gives_way_to_the_one_before(whole,
                                                                  tmp_path):
  """Into a copy of `whole` (see above), re-run here: the claim is what the
  re-run reads and writes."""
  out = _copy(whole, tmp_path)
  before = dict(_final_model(out))
  bad = os.path.join(out, 'fedhdp_r0.5', 'checkpoints', f'round_{ROUNDS + 1}')
  os.makedirs(bad)
  with open(os.path.join(bad, 'saved_model.pb'), 'wb') as f:
    f.write(b'not a saved model')
  result = _finish(out)
  assert result.returncode == 0, result.stderr[-2000:]
  assert f'resuming from round {ROUNDS}' in result.stdout
  assert not os.path.exists(bad)
  after = _final_model(out)
  for name, value in before.items():
    np.testing.assert_array_equal(after[name], value)

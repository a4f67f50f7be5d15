"""One run's lifecycle (`simulation.run_lifecycle`), as every setting gets it.

With a stand-in program (no model): the folder is held before anything is
built, the run key is in the folder before the program is built, the
program is closed however the rounds end, the summary is written last (so
a run that failed leaves none), and a finished run is found again only
under its own key.
"""

import json
import os

import pytest

from tests import repository
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import folder_lock
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import run_lifecycle

# round_loop imports TFF.
pytestmark = pytest.mark.tf

KEY = {'task': 'stand-in', 'rounds': 2}
SETTINGS = run_lifecycle.RunSettings(rounds=2, eval_every=1,
                                     checkpoint_every=0,
                                     unsafe_seeded_dp_randomness=True,
                                     seed=5)


class _Program(round_loop.RoundProgram):
  columns = ('round', 'acc_g')
  rounds = 2

  def __init__(self, fail_at=None):
    self.closed = False
    self._fail_at = fail_at

  def train(self, round_num):
    if round_num == self._fail_at:
      raise RuntimeError('round failed')
    return {}

  def evaluate(self, round_num):
    return {'acc_g': 10.0 * round_num}

  def weights(self):
    raise AssertionError('no model is saved here')

  def close(self):
    self.closed = True


def _summarize(program, result):
  del program
  return {'metrics': result.final_metrics}


def test_a_run_claims_its_folder_before_it_builds_and_writes_its_summary_last(
    tmp_path):
  run_dir = str(tmp_path / 'run')
  seen = {}

  def build(claimed):
    seen['key_written'] = checkpointing.RunCheckpoint(
        os.path.join(run_dir, 'checkpoints'), KEY).check_key()
    seen['secret'] = claimed.secret()
    seen['client_seeds'] = claimed.client_seeds(2)
    seen['summary_before'] = os.path.exists(
        os.path.join(run_dir, 'summary.json'))
    seen['program'] = _Program()
    return seen['program']

  summary, program = run_lifecycle.run(run_dir, KEY, SETTINGS, build,
                                       _summarize, progress=False)
  assert seen['key_written'] and not seen['summary_before']
  assert seen['secret'] == 5  # seeded: the flag's seed, as dp_randomness
  assert seen['client_seeds'] == [5 * 100003, 5 * 100003 + 1]
  assert program is seen['program'] and program.closed
  assert summary['metrics']['acc_g'] == 20.0 and summary['seconds'] >= 0
  with open(os.path.join(run_dir, 'summary.json')) as f:
    assert json.load(f) == summary
  assert run_lifecycle.completed_summary(run_dir, KEY) == summary
  assert run_lifecycle.completed_summary(run_dir, KEY, rounds=3) is None
  with pytest.raises(checkpointing.CheckpointError, match='differs in: rounds'):
    run_lifecycle.completed_summary(run_dir, dict(KEY, rounds=3))


def test_a_failed_round_closes_the_program_and_leaves_no_summary(tmp_path):
  run_dir = str(tmp_path / 'run')
  program = _Program(fail_at=2)
  with pytest.raises(RuntimeError, match='round failed'):
    run_lifecycle.run(run_dir, KEY, SETTINGS, lambda claimed: program,
                      _summarize, progress=False)
  assert program.closed
  assert not os.path.exists(os.path.join(run_dir, 'summary.json'))
  assert run_lifecycle.completed_summary(run_dir, KEY) is None


def test_a_held_folder_is_refused_before_anything_is_built(tmp_path):
  run_dir = str(tmp_path / 'run')
  holder = repository.hold_folder(run_dir)
  try:
    built = []
    with pytest.raises(folder_lock.FolderInUseError):
      run_lifecycle.run(run_dir, KEY, SETTINGS,
                        lambda claimed: built.append(1) or _Program(),
                        _summarize, progress=False)
    assert not built
    assert not os.path.exists(os.path.join(run_dir, 'checkpoints'))
  finally:
    holder.kill()
    holder.wait()

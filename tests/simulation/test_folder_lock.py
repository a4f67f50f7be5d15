"""One run per output folder at a time (`simulation.folder_lock`).

A second command into a folder that a live run holds stops at once with one
line naming the folder and leaves the first run's files alone; a run that
died (even by SIGKILL) holds nothing.
"""

import os
import signal
import subprocess
import sys
import tempfile

import pytest

from tests import repository
from tff_hdp.simulation import folder_lock

ROOT = repository.ROOT
ROUNDS = 4
def test_a_held_folder_is_refused_and_freed_when_its_holder_dies(tmp_path):
  folder = str(tmp_path / 'out')
  holder = repository.hold_folder(folder)
  try:
    with pytest.raises(folder_lock.FolderInUseError,
                       match=f'{folder} is in use by another run \\(process '
                       f'{holder.pid}\\)'):
      with folder_lock.exclusive(folder):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  with folder_lock.exclusive(folder):  # the kernel dropped the dead one's
    pass


def test_a_folder_of_lock_files_only_is_removed_and_any_other_kept(tmp_path):
  unused = tmp_path / 'unused'
  (unused / 'fedhdp').mkdir(parents=True)
  for folder in (unused, unused / 'fedhdp'):
    (folder / folder_lock.LOCK_FILE).write_text('1')
  assert folder_lock.remove_if_unused(str(unused))
  assert not unused.exists()
  used = tmp_path / 'used'
  (used / 'fedhdp').mkdir(parents=True)
  (used / folder_lock.LOCK_FILE).write_text('1')
  (used / 'fedhdp' / 'rounds.csv').write_text('round\n')
  assert not folder_lock.remove_if_unused(str(used))
  assert sorted(os.listdir(used)) == [folder_lock.LOCK_FILE, 'fedhdp']
  assert os.listdir(used / 'fedhdp') == ['rounds.csv']


def _rows(output_dir):
  return repository.rounds_rows(output_dir, 'fedhdp')


@pytest.mark.tf
def test_a_second_run_into_the_same_folder_stops_at_once(tmp_path):
  """The first run is stopped (SIGSTOP, `repository.start_paused_after_rows`)
  right after its first round's row while the second command starts, so it
  is alive and holds the folder however long that start takes (it once
  needed 100 rounds to outlast it), and then goes on (SIGCONT) to finish its
  rounds, across a checkpoint and an evaluation."""
  out = str(tmp_path / 'conc')
  command = [sys.executable, os.path.join(ROOT, 'run_experiment.py'),
             f'--rounds={ROUNDS}', '--checkpoint_every=2',
             f'--eval_every={ROUNDS // 2}', f'--output_dir={out}']
  with tempfile.TemporaryFile() as output:
    first = repository.start_paused_after_rows(command, out, 'fedhdp', 1,
                                               output, cwd=ROOT)
    try:
      try:
        second = subprocess.run(command, cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert first.poll() is None, 'the first run must still be running'
      finally:
        first.send_signal(signal.SIGCONT)
    finally:
      first_code = first.wait(timeout=600)
  assert second.returncode == 2
  lines = second.stderr.strip().splitlines()
  assert lines == [f'run_experiment.py: error: {out} is in use by another run '
                   f'(process {first.pid}); wait for it to finish or pass '
                   'another --output_dir.'], second.stderr[-2000:]
  assert first_code == 0
  rows = _rows(out)
  assert [int(r['round']) for r in rows] == list(range(1, ROUNDS + 1))
  assert all(r['acc_g'] for r in rows if int(r['round']) % (ROUNDS // 2) == 0)

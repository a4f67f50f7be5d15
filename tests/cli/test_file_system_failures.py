"""A file or folder the run cannot write is one line naming it (exit 2), never
a traceback, and never costs the run's other results.

Read-only files in `--output_dir` are found before training
(`cli.entry.check_writable`); a file that becomes read-only while the run
trains is reported after everything else was saved. Root writes read-only
files, so under root the runs are started without the capabilities that
let it (`setpriv`), subject to file modes as any other user. A full disk is
a small tmpfs mounted for the test, which needs root (skipped, saying why,
without it); the same command resumes once space is freed.
"""

import csv
import errno
import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf

from tests import repository
from tff_hdp.reporting import tables
from tff_hdp.simulation import checkpointing

pytestmark = pytest.mark.tf

RUN = [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
       '--task=digits', '--algorithms=fedhdp', '--r=1',
       '--clients_per_round=10']
CONFIG = 'fedhdp_r1'


def _as_a_user(command):
  """`command` subject to file modes even when run by root."""
  if os.geteuid() != 0:
    return command
  setpriv = shutil.which('setpriv')
  assert setpriv, 'setpriv (util-linux) is needed to test file modes as root'
  return [setpriv, '--bounding-set=-dac_override,-dac_read_search'] + command


def _run(*flags, timeout=300):
  return subprocess.run(_as_a_user(RUN + list(flags)), capture_output=True,
                        text=True, timeout=timeout)


def _one_error(result):
  assert 'Traceback' not in result.stderr, result.stderr
  assert result.returncode == 2, result.stderr
  [line] = result.stderr.strip().splitlines()
  return line


def _read_only(path):
  os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) & ~0o222)


def test_a_read_only_results_file_stops_the_run_before_it_trains(tmp_path):
  out = tmp_path / 'out'
  out.mkdir()
  (out / 'results.md').write_text('an earlier table\n')
  _read_only(out / 'results.md')
  line = _one_error(_run('--rounds=2', f'--output_dir={out}', timeout=60))
  assert line == (
      f'run_experiment.py: error: --output_dir={out}: {out}/results.md is not '
      'writable (a run writes there); make it writable or choose another '
      '--output_dir')
  assert (out / 'results.md').read_text() == 'an earlier table\n'
  assert sorted(os.listdir(out)) == ['results.md']


def test_a_read_only_checkpoints_folder_stops_the_resumed_run(tmp_path):
  out = tmp_path / 'out'
  flags = ['--rounds=1', '--checkpoint_every=1', f'--output_dir={out}']
  # The first run only fills the folder: in this process
  # (`repository.run_program`); the resumed one meets the file modes.
  first = repository.run_program('run_experiment.py', *RUN[2:], *flags)
  assert first.returncode == 0, first.stderr
  checkpoints = out / CONFIG / 'checkpoints'
  before = sorted(os.listdir(checkpoints))
  assert before
  _read_only(checkpoints)
  try:
    line = _one_error(_run(*flags, timeout=60))
  finally:
    os.chmod(checkpoints, 0o700)  # so that pytest can remove it
  assert line == (
      f'run_experiment.py: error: --output_dir={out}: {checkpoints} is not '
      'writable (a run writes there); make it writable or choose another '
      '--output_dir')
  assert sorted(os.listdir(checkpoints)) == before


def _rounds_done(config_dir):
  try:
    with open(config_dir / 'rounds.csv') as f:
      return len(list(csv.DictReader(f)))
  except FileNotFoundError:
    return 0


def test_a_results_file_made_read_only_while_training_is_one_line_at_the_end(
    tmp_path):
  out = tmp_path / 'out'
  out.mkdir()
  (out / 'results.md').write_text('an earlier table\n')
  # The run stops itself after its first round's row, is made to meet a
  # read-only table file, and goes on to its second and last round.
  with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
    run = repository.start_paused_after_rows(
        _as_a_user(RUN + ['--rounds=2', '--checkpoint_every=0',
                          f'--output_dir={out}']), str(out), CONFIG, 1,
        stderr, stdout=stdout)
    _read_only(out / 'results.md')
    os.kill(run.pid, signal.SIGCONT)
    status = run.wait(timeout=300)
    stdout.seek(0)
    stderr.seek(0)
    printed, errors = stdout.read().decode(), stderr.read().decode()
  assert status == 2, errors
  assert 'Traceback' not in errors, errors
  assert errors.strip().splitlines()[-1] == (
      f'run_experiment.py: error: {out}/results.md: Permission denied')
  # The read-only file is kept; everything else was saved, and the table was
  # printed before the file was written.
  assert (out / 'results.md').read_text() == 'an earlier table\n'
  assert _rounds_done(out / CONFIG) == 2
  assert (out / CONFIG / 'summary.json').exists()
  with open(out / 'results.csv') as f:
    assert [r['configuration'] for r in csv.DictReader(f)] == [CONFIG]
  assert f'| {CONFIG} ' in printed


@pytest.mark.parametrize('make_it_fail', ['folder', 'file'])
def test_the_flag_check_names_an_unwritable_output_folder(tmp_path,
                                                          make_it_fail):
  # --output_dir itself read-only, or a file in its place: one line before
  # TensorFlow is imported.
  out = tmp_path / 'out'
  if make_it_fail == 'folder':
    out.mkdir()
    _read_only(out)
  else:
    out.write_text('not a folder\n')
  try:
    line = _one_error(_run('--rounds=1', f'--output_dir={out}', timeout=60))
  finally:
    if out.is_dir():
      os.chmod(out, 0o700)
  assert line.startswith(f'run_experiment.py: error: --output_dir={out}: ')


_RAISING_MAIN = '''
import sys
sys.path.insert(0, {root!r})
from tff_hdp.cli import entry

def main(argv):
  import tensorflow as tf
  {raise_it}

entry.run(main, 'usage')
'''


@pytest.mark.parametrize('raise_it, line', [
    # What TF's checkpoint writer raises for a folder it cannot write.
    ('raise tf.errors.PermissionDeniedError(None, None, "out/checkpoints/'
     'ckpt_temp; Permission denied\\n\\t [[{{node SaveV2}}]]")',
     'out/checkpoints/ckpt_temp; Permission denied'),
    ('raise OSError(28, "No space left on device", "out/rounds.csv")',
     'out/rounds.csv: No space left on device (the disk is full); free '
     'space, then re-run the same command to resume from the last '
     'checkpoint'),
    ('raise OSError(18, "Invalid cross-device link", "a.tmp", None, "out/a")',
     'a.tmp -> out/a: Invalid cross-device link'),
])
def test_file_errors_anywhere_in_a_run_are_one_line(tmp_path, raise_it, line):
  program = tmp_path / 'program.py'
  program.write_text(_RAISING_MAIN.format(root=repository.ROOT,
                                          raise_it=raise_it))
  result = subprocess.run([sys.executable, str(program)], capture_output=True,
                          text=True, timeout=120)
  assert _one_error(result) == f'program.py: error: {line}'


def test_a_table_file_that_cannot_be_written_does_not_stop_the_other(
    tmp_path):
  (tmp_path / 'results.md').mkdir()  # in the way of the file
  with pytest.raises(IsADirectoryError) as raised:
    tables.write_table(str(tmp_path), ['a'], [[1]])
  assert raised.value.filename == str(tmp_path / 'results.md')
  assert (tmp_path / 'results.csv').read_text() == 'a\n1\n'


_DISK_FULL = ('No space left on device (the disk is full); free space, then '
              're-run the same command to resume from the last checkpoint')


@pytest.fixture
def small_disk(tmp_path):
  """A 1 MiB tmpfs: a disk the test can fill (and free) at will."""
  if os.geteuid() != 0 or shutil.which('mount') is None:
    pytest.skip('a full disk: mounting a small tmpfs needs root and `mount`')
  disk = tmp_path / 'disk'
  disk.mkdir()
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs',
                            str(disk)], capture_output=True, text=True)
  if mounted.returncode != 0:
    pytest.skip(f'a full disk: cannot mount a tmpfs: {mounted.stderr.strip()}')
  try:
    yield disk
  finally:
    subprocess.run(['umount', '--lazy', str(disk)], check=True)


def _fill(disk):
  """Writes `disk`/filler until the disk is full."""
  with open(disk / 'filler', 'wb', buffering=0) as f:
    try:
      while True:
        f.write(bytes(1 << 16))
    except OSError as e:
      assert e.errno == errno.ENOSPC, e


def test_a_disk_full_mid_run_is_one_line_naming_the_file_then_resumes(
    small_disk):
  out = small_disk / 'out'
  command = RUN + ['--rounds=3', '--checkpoint_every=1', f'--output_dir={out}']
  # The run stops itself after round 2's row, the disk fills, and it goes on.
  with tempfile.TemporaryFile() as stderr:
    run = repository.start_paused_after_rows(command, str(out), CONFIG, 2,
                                             stderr, stdout=subprocess.DEVNULL)
    _fill(small_disk)
    os.kill(run.pid, signal.SIGCONT)
    status = run.wait(timeout=300)
    stderr.seek(0)
    printed = stderr.read().decode()
  assert 'Traceback' not in printed, printed[-2000:]
  errors = [line for line in printed.splitlines() if 'error' in line.lower()]
  assert status == 2, errors
  [line] = errors
  # Which write meets the full disk first is a race: the checkpoint, its
  # key or its seconds, a row.
  assert re.fullmatch(rf'run_experiment\.py: error: {re.escape(str(out))}/'
                      rf'{CONFIG}/\S+: {re.escape(_DISK_FULL)}', line), line
  assert not glob.glob(str(out / CONFIG / 'checkpoints' / '*_temp*'))

  os.remove(small_disk / 'filler')
  # The resume in this process (`repository.run_program`): what it reads and
  # writes is the claim.
  result = repository.run_program('run_experiment.py', *command[2:])
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'resuming from round' in result.stdout
  rows = repository.rounds_rows(str(out), CONFIG)
  assert [int(r['round']) for r in rows] == [1, 2, 3]


def test_a_new_run_into_a_full_disk_is_one_line_naming_its_folder(
    small_disk):
  _fill(small_disk)
  out = small_disk / 'out'
  line = _one_error(_run('--rounds=2', f'--output_dir={out}', timeout=120))
  assert line == f'run_experiment.py: error: {out}: {_DISK_FULL}'


def test_tf_file_ops_on_a_full_disk_fail_naming_the_file(small_disk):
  # TF raises ResourceExhaustedError, which was a 61-line traceback.
  _fill(small_disk)
  path = str(small_disk / 'tensor')
  with pytest.raises(OSError) as raised, checkpointing.writing(path):
    tf.io.write_file(path, 'x' * 100_000)
  assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, path)

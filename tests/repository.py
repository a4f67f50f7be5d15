"""Where the tests find the repository and the real data sets.

A test that needs a real data set asks `data_path` for it. When the file is
absent the test is skipped with a reason that names the file and the setting
(`$TFF_HDP_DATA`, default `../shared/data`); under `CI`, tests/conftest.py
turns any such skip into a failed run, so CI never passes without running them.
"""

import contextlib
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tff_hdp import tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISSING_DATA = 'missing data set'


def task_data(name: str) -> str:
  """The folder registered task `name` reads (`tasks.REGISTRY`), or skips
  the calling test naming what is missing."""
  return data_path(tasks.REGISTRY[name].data)


def data_path(*parts: str) -> str:
  """`data_root()/parts...`, or skips the calling test naming what is
  missing."""
  path = os.path.join(tasks.data_root(), *parts)
  if not os.path.exists(path):
    pytest.skip(f'{MISSING_DATA}: {path} (set ${tasks.DATA_ROOT_ENV} to '
                'the folder holding the data sets)')
  return path


def tensorflow_stand_in(folder: str, message: str) -> str:
  """Writes into `folder` a `tensorflow` package whose import raises
  ImportError(`message`); returns `folder`, to put first on a path."""
  os.makedirs(os.path.join(folder, 'tensorflow'), exist_ok=True)
  with open(os.path.join(folder, 'tensorflow', '__init__.py'), 'w') as f:
    f.write(f'raise ImportError({message!r})\n')
  return folder


def rounds_rows(output_dir: str, configuration: str) -> list[dict]:
  """The rows of a run's `<configuration>/rounds.csv` so far ([] before)."""
  path = os.path.join(output_dir, configuration, 'rounds.csv')
  if not os.path.exists(path):
    return []
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def start_paused_after_rows(command, output_dir: str, configuration: str,
                            rows: int, output, **popen) -> subprocess.Popen:
  """Starts `command` (stdout and stderr to the file `output` unless `popen`
  says otherwise) and returns its Popen once it has stopped itself (SIGSTOP,
  tests/stop_after_rows/sitecustomize.py) right after
  `<configuration>/rounds.csv` got its `rows`-th row, so that what a test
  does there does not depend on the machine's speed; SIGCONT resumes it. A
  run that ends before that row fails the calling test with its exit status
  and the end of `output`."""
  path = os.path.join(output_dir, configuration, 'rounds.csv')
  env = dict(popen.pop('env', os.environ))
  env['PYTHONPATH'] = os.pathsep.join(
      [os.path.join(ROOT, 'tests', 'stop_after_rows')] +
      ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
  env['TFF_HDP_TEST_STOP_AFTER'] = f'{rows}:{path}'
  proc = subprocess.Popen(command, start_new_session=True, env=env,
                          **({'stdout': output, 'stderr': output} | popen))
  deadline = time.time() + 300
  while True:
    pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
    if pid and os.WIFSTOPPED(status):
      return proc
    if pid:  # it ended: say how, with what it printed
      proc.returncode = os.waitstatus_to_exitcode(status)
      with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # a worker it left
      output.seek(0)
      raise AssertionError(
          f'the run ended (exit status {proc.returncode}) before row {rows}'
          f' of {path}, with {len(rounds_rows(output_dir, configuration))} '
          f'rows; its output ends:\n{output.read()[-3000:].decode()}')
    if time.time() > deadline:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      raise AssertionError(f'the run wrote no row {rows} of {path} in 300 s')
    time.sleep(0.05)


def kill_after_rows(command, output_dir: str, configuration: str, rows: int,
                    **popen) -> int:
  """Starts `command` in a session of its own and SIGKILLs the session (TFF's
  worker with it) right after `<configuration>/rounds.csv` gets its `rows`-th
  row (`start_paused_after_rows`). Returns the rows written (`rows`)."""
  with tempfile.TemporaryFile() as output:
    proc = start_paused_after_rows(command, output_dir, configuration, rows,
                                   output, **popen)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
  return len(rounds_rows(output_dir, configuration))


def run_losing_its_worker(command, output_dir: str, configuration: str,
                          rows: int, kill_worker) -> tuple[int, list[str], int]:
  """Runs `command`, calls `kill_worker(run)` (`run` its Popen) while it is
  stopped right after `<configuration>/rounds.csv` got its `rows`-th row
  (`start_paused_after_rows`), and lets it go on, to meet the loss in its
  next round. Returns the run's exit status, the lines of its stderr that
  say "error", and the rows written. A run still going 120 s after the kill
  (waiting on the lost worker) is killed and fails the test, as does a
  traceback."""
  with tempfile.TemporaryFile() as stderr:
    run = start_paused_after_rows(command, output_dir, configuration, rows,
                                  stderr, stdout=subprocess.DEVNULL)
    kill_worker(run)
    os.kill(run.pid, signal.SIGCONT)
    try:
      run.wait(timeout=120)
    except subprocess.TimeoutExpired:
      os.killpg(run.pid, signal.SIGKILL)
      run.wait()
      raise AssertionError('the run still waits on its lost worker') from None
    stderr.seek(0)
    printed = stderr.read().decode()
  assert 'Traceback' not in printed, printed[-2000:]
  errors = [line for line in printed.splitlines() if 'error' in line.lower()]
  return run.returncode, errors, len(rounds_rows(output_dir, configuration))


_HOLD = ('import sys, time\n'
         'from tff_hdp.simulation import folder_lock\n'
         'with folder_lock.exclusive(sys.argv[1]):\n'
         '  print("held", flush=True)\n'
         '  time.sleep(600)\n')


@contextlib.contextmanager
def closed_address(host: str = '127.0.0.1'):
  """host:port of a socket bound and never listened on: connections are
  refused, and no other process (another test's TFF worker) can take the
  port while the block runs, as one merely picked free could be."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
    closed.bind((host, 0))
    yield f'{host}:{closed.getsockname()[1]}'


def hold_folder(folder: str) -> subprocess.Popen:
  """A process of its own that holds `folder` (`folder_lock`) until it is
  killed; returns once it does."""
  proc = subprocess.Popen([sys.executable, '-c', _HOLD, folder], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline().strip() == 'held'
  return proc


def plant_secret(source_dir: str, target_dir: str, configuration: str) -> None:
  """Gives the run in `target_dir` the secret seed of the one in
  `source_dir` (checking that it is owner-only), so that both draw the same
  DP noise and sampling."""
  secret = os.path.join(configuration, 'checkpoints', 'dp_secret_seed')
  mode = os.stat(os.path.join(source_dir, secret)).st_mode & 0o777
  assert mode == 0o600, oct(mode)
  os.makedirs(os.path.dirname(os.path.join(target_dir, secret)))
  shutil.copy(os.path.join(source_dir, secret), os.path.join(target_dir, secret))


# Entry points whose `run()` a test may call in this process (`run_program`).
_PROGRAMS = ('run_experiment.py', 'reproduce.py')
# TFF's local worker keeps memory from every run it serves (about 45 MB a
# short digits run): a fresh one after this many runs in this process.
_RUNS_PER_WORKER = 10
_runs_here = 0


def run_program(program: str, *flags: str,
                cwd: str | None = None) -> subprocess.CompletedProcess:
  """Runs `program` (run_experiment.py, reproduce.py) with `flags` in this
  test process, as its command line would in its own: its exit status, and
  what it wrote to stdout and stderr (a traceback and status 1 for an
  exception that escapes). A fresh process pays about 8 s importing
  TensorFlow and TFF and starting a worker; tests that check what a command
  computes and prints run here, and those about a process's life (kills,
  signals, locks held by two runs, workers that die) in their own.

  Flags start from their defaults, and every flag value, the working folder
  and the TFF context (a run with --workers installs its own) are restored
  after."""
  global _runs_here
  # pylint: disable=g-import-not-at-top
  import contextlib
  import importlib
  import io
  import traceback
  from absl import flags as absl_flags
  from absl.testing import flagsaver
  # pylint: enable=g-import-not-at-top
  if program not in _PROGRAMS:
    raise ValueError(f'{program} runs in a process of its own.')
  module = importlib.import_module(f'tff_hdp.cli.{program[:-3]}')
  out, err = io.StringIO(), io.StringIO()
  old_cwd, old_argv = os.getcwd(), sys.argv
  code = 0
  with flagsaver.flagsaver():
    absl_flags.FLAGS.unparse_flags()
    sys.argv = [program, *flags]
    try:
      os.chdir(cwd or ROOT)
      with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
          module.run()
        except SystemExit as e:
          code = e.code if isinstance(e.code, int) else (0 if e.code is None
                                                           else 1)
          if isinstance(e.code, str):
            err.write(e.code + '\n')
        except BaseException:  # pylint: disable=broad-except
          traceback.print_exc(file=err)
          code = 1
    finally:
      os.chdir(old_cwd)
      sys.argv = old_argv
      absl_flags.FLAGS.unparse_flags()
  if 'tensorflow_federated' in sys.modules:  # the run trained (no dry run)
    from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
    runtime.init()  # the test process's own context, if a run replaced it
    _runs_here += 1
    if _runs_here % _RUNS_PER_WORKER == 0:
      runtime.renew_local_worker()
  return subprocess.CompletedProcess([program, *flags], code, out.getvalue(),
                                     err.getvalue())

"""Runs across TFF workers (run_worker.py's `workers.start_worker`, on
127.0.0.1) equal the local run, repeat exactly, and end with one line when a
worker dies, from which the run resumes.

Each setting's short run of tests/pinned_runs.py (trusted per-client, trusted
with Ditto and cohorts, untrusted server, cross-silo with IFCA) is run with
--workers and compared with its pinned local outputs: every CSV, summary and
table to the pinned tolerances, every saved model (final and personal) to
1e-6, and per client id (the personal models are saved by client id, IFCA's
clusters are in rounds.csv and summary.json by silo).

Runs whose workers all stay alive run in this process
(`repository.run_program`): what they compute is the claim, and the workers
are processes of their own either way. A run that loses its worker, or finds
none, ends with `os._exit` and runs in a process of its own.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import portpicker
import pytest

from tests import pinned_runs
from tests import repository
from tests import test_pinned_outputs
from tff_hdp.simulation import workers

pytestmark = pytest.mark.tf

MODEL_TOLERANCE = 1e-6


def _group(setting):
  """The tests of one setting read each other's runs (`_collected`): one
  xdist worker runs them."""
  return pytest.mark.xdist_group(f'test_remote_workers_{setting}')


def _param(setting, *rest):
  return pytest.param(setting, *rest, marks=_group(setting))


def _start(port):
  return workers.start_worker(port, workers.LOOPBACK, die_with_parent=True,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)


@pytest.fixture(scope='module')
def three_workers():
  ports = [portpicker.pick_unused_port() for _ in range(3)]
  processes = [_start(p) for p in ports]
  yield [f'{workers.LOOPBACK}:{p}' for p in ports]
  for process in processes:
    workers.stop_process(process)


@pytest.fixture(scope='module')
def pinned():
  with open(pinned_runs.PINNED_FILE) as f:
    return json.load(f)


_collected = {}  # (setting, count) -> what the run wrote (`collect`)
_folders = {}  # (setting, count) -> the run's output folder


def _run(setting, addresses, output_dir, extra_flags=()):
  if setting in pinned_runs.DATA_TASKS:  # skips, naming it, when absent
    repository.task_data(pinned_runs.DATA_TASKS[setting])
  pinned_runs.run(setting, output_dir,
                  (f'--workers={",".join(addresses)}', *extra_flags),
                  in_process=True)
  return pinned_runs.collect(output_dir)


# Each setting on two or three workers (Ditto in cohorts, where every
# worker is busy, on both): each worker count runs every kind of process.
RUNS = [_param('trusted', 3), _param('trusted_ditto_cohorts', 2),
        _param('trusted_ditto_cohorts', 3), _param('untrusted', 2),
        _param('cross_silo', 3)]


@pytest.mark.parametrize('setting,count', RUNS)
def test_workers_give_the_local_results(setting, count, three_workers, pinned,
                                        tmp_path):
  out = str(tmp_path / 'out')
  got = _run(setting, three_workers[:count], out)
  _collected[setting, count], _folders[setting, count] = got, out
  assert_local_results(f'{setting} on {count} workers', setting, got, pinned)


@pytest.mark.parametrize('setting,count', RUNS)
def test_workers_reading_the_clients_themselves_give_the_local_results(
    setting, count, three_workers, pinned, tmp_path):
  """Bit for bit the run with the examples sent (the one of
  test_workers_give_the_local_results where this worker ran it, else a run
  of its own). Two runs on the same workers equal to the last bit are also
  the check that a run across workers repeats exactly (for
  trusted_ditto_cohorts on three workers: cohorts, Ditto's personal models,
  every worker busy)."""
  got = _run(setting, three_workers[:count], str(tmp_path / 'out'),
             (f'--worker_data={tmp_path / "clients.sqlite"}',))
  assert_local_results(f'{setting} on {count} workers reading the clients',
                        setting, got, pinned)
  sent = _collected.get((setting, count)) or _run(
      setting, three_workers[:count], str(tmp_path / 'sent'))
  assert got == sent


def assert_local_results(where, setting, got, pinned):
  want = pinned[setting]['outputs']
  test_pinned_outputs.compare(where, got, want)
  models = [name for name in want if name.endswith('.npz')]
  # The trusted and untrusted settings save their final (and Ditto's
  # personal) models; the cross-silo runs here save none (IFCA's clusters
  # are compared per silo in summary.json's final_clusters above).
  assert bool(models) == (setting != 'cross_silo'), models
  for name in models:
    _assert_models_close(f'{where}: {name}', got[name], want[name])


def _assert_models_close(where, got, want):
  for array, wanted in want.items():
    if not wanted['dtype'].startswith(('float', 'int')):
      assert got[array] == wanted, f'{where}: {array}'  # client ids
      continue
    np.testing.assert_allclose(
        np.asarray(got[array]['values'], dtype=np.float64),
        np.asarray(wanted['values'], dtype=np.float64),
        rtol=0, atol=MODEL_TOLERANCE, err_msg=f'{where}: {array}')


def test_cross_silo_personal_models_match_per_silo(three_workers, tmp_path):
  """Both runs in this process (see the module docstring)."""
  repository.task_data('vehicle')
  # mrmtl alone: IFCA's flags (--num_clusters, --selection_*) are refused.
  flags = [f for f in pinned_runs.SETTINGS['cross_silo']
           if not f.startswith(('--algorithms', '--lambdas',
                                '--checkpoint_every', '--num_clusters',
                                '--selection_fraction', '--selection_share'))]
  flags += ['--algorithms=mrmtl', '--lambdas=1', '--checkpoint_every=2']
  personal = os.path.join('mrmtl_lr0.1_lambda1', 'checkpoints',
                          'personal_round_2.npz')
  models = []
  for extra in ((), (f'--workers={",".join(three_workers)}',)):
    out = tmp_path / f'out{len(models)}'
    result = repository.run_program(
        'run_experiment.py',
        *[f.replace(pinned_runs.VEHICLE_PLACEHOLDER, pinned_runs.VEHICLE_DIR)
          for f in flags], *extra, f'--output_dir={out}')
    assert result.returncode == 0, result.stderr[-2000:]
    models.append(pinned_runs.collect(str(out))[personal])
  local, remote = models
  assert len(local) > 1  # silo ids and at least one layer
  _assert_models_close('cross-silo personal models', remote, local)


@_group('trusted_ditto_cohorts')
def test_another_worker_count_is_another_run(three_workers, tmp_path):
  """Both runs in this process: the refusal reads the folder's run key.
  The folder is test_workers_give_the_local_results' two-worker run where
  this worker ran it (the same flags), else a run of its own."""
  out = _folders.get(('trusted_ditto_cohorts', 2))
  if out is None:
    out = str(tmp_path / 'out')
    pinned_runs.run('trusted_ditto_cohorts', out,
                    (f'--workers={",".join(three_workers[:2])}',),
                    in_process=True)
  result = repository.run_program(
      'run_experiment.py',
      *pinned_runs.flags('trusted_ditto_cohorts', out,
                         (f'--workers={",".join(three_workers)}',)))
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'differs in: workers' in result.stderr.strip().splitlines()[-1]


# The worker dies while the run is stopped after round 3's row
# (`repository.run_losing_its_worker`); round 4 meets the loss, and resumes.
ROUNDS = 4
_LOST_FLAGS = ['--task=digits', '--algorithms=fedhdp', '--r=0.5',
               f'--rounds={ROUNDS}', '--clients_per_round=20',
               f'--eval_every={ROUNDS}', '--checkpoint_every=1',
               '--worker_timeout=3']


def _rows(output_dir):
  return repository.rounds_rows(output_dir, 'fedhdp_r0.5')


def test_a_lost_worker_ends_the_run_with_one_line_and_it_resumes(tmp_path):
  """The run that loses its worker ends with `os._exit`: in a process of its
  own. The resume, on a restarted worker that stays, runs in this process:
  the claim on it is what it reads and writes."""
  port = portpicker.pick_unused_port()
  address = f'{workers.LOOPBACK}:{port}'
  out = str(tmp_path / 'out')
  flags = [*_LOST_FLAGS, f'--workers={address}', f'--output_dir={out}']
  command = [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
             *flags]
  worker = _start(port)

  def kill_worker(run):
    del run
    worker.send_signal(signal.SIGKILL)
    worker.wait()

  status, errors, killed_at = repository.run_losing_its_worker(
      command, out, 'fedhdp_r0.5', 3, kill_worker)
  assert 3 <= killed_at < ROUNDS, 'the kill must land mid-run'
  assert status == 3, errors
  assert errors == [
      f'run_experiment.py: error: TFF worker {address} stopped answering (no '
      'answer for 3 s, --worker_timeout); restart it and run the same command '
      'again to resume from the last checkpoint']

  worker = _start(port)
  try:
    result = repository.run_program('run_experiment.py', *flags)
  finally:
    workers.stop_process(worker)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = _rows(out)
  assert [int(r['round']) for r in rows] == list(range(1, ROUNDS + 1))


def test_a_worker_that_is_not_there_is_named_at_once(tmp_path):
  with repository.closed_address(workers.LOOPBACK) as address:
    result = subprocess.run(
        [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
         *_LOST_FLAGS, f'--workers={address}',
         f'--output_dir={tmp_path / "out"}'],
        capture_output=True, text=True, timeout=300)
  assert result.returncode == 3
  assert result.stderr.strip().splitlines() == [
      f'run_experiment.py: error: TFF worker {address} does not answer '
      '(waited 3 s, --worker_timeout); start it with run_worker.py']

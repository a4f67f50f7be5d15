"""A --workers address where no worker answers is named at the start, with
what a plain connection found, instead of a silent wait of --worker_timeout.
"""

import os
import subprocess
import sys

import pytest

from tests import repository

pytestmark = pytest.mark.tf

RUN = [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
       '--task=digits', '--algorithms=fedhdp', '--rounds=1']


def test_a_closed_port_is_named_with_the_reason_before_the_wait(tmp_path):
  with repository.closed_address() as address:
    result = subprocess.run(
        RUN + [f'--workers={address}', '--worker_timeout=6',
               f'--output_dir={tmp_path / "out"}'],
        capture_output=True, text=True, timeout=300)
  assert result.returncode == 3, result.stderr
  assert 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines() == [
      f'waiting up to 6 s (--worker_timeout) for TFF worker {address}: '
      'connection refused: nothing listens there; is run_worker.py '
      f'--listen={address} running on that machine?',
      f'run_experiment.py: error: TFF worker {address} does not answer '
      '(waited 6 s, --worker_timeout); start it with run_worker.py']


def test_a_host_that_does_not_resolve_ends_the_run_without_the_wait(
    tmp_path):
  result = subprocess.run(
      RUN + ['--workers=no-such-host.invalid:8001',
             f'--output_dir={tmp_path / "out"}'],
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 3, result.stderr
  assert result.stderr.strip().splitlines() == [
      'run_experiment.py: error: --workers: no-such-host.invalid:8001 '
      '(unknown host no-such-host.invalid)']

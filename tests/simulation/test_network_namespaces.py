"""Workers on hosts of their own, as near as one machine gets: each TFF
worker runs in a network namespace made here (`ip netns`), reached from the
driver over a veth pair with an address of its own, and reads the clients
from its file (`--worker_data`) itself. The run equals the pinned local run.

Skipped, saying why, where namespaces cannot be made (not root, no `ip`).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests import pinned_runs
from tests import repository
from tests.simulation import test_remote_workers
from tff_hdp.simulation import remote_execution

pytestmark = pytest.mark.tf

_PORT = 8001
_SETTING = 'trusted_ditto_cohorts'


def _ip(*args, check=True):
  return subprocess.run(['ip', *args], capture_output=True, text=True,
                        check=check)


def _namespaces_or_skip(count):
  """[(namespace, worker address)], each namespace joined to this one by a
  veth pair on 10.231.<k>.0/24; skips naming why it cannot be made."""
  if shutil.which('ip') is None:
    pytest.skip('network namespaces: no `ip` command (iproute2)')
  if os.geteuid() != 0:
    pytest.skip('network namespaces: `ip netns` needs root')
  made = []
  tag = os.getpid() % 10000
  try:
    for k in range(count):
      name, host, inner = f'tffhdp{tag}w{k}', f'th{tag}w{k}', f'tw{tag}w{k}'
      _ip('netns', 'add', name)
      made.append(name)
      _ip('link', 'add', host, 'type', 'veth', 'peer', 'name', inner)
      _ip('link', 'set', inner, 'netns', name)
      _ip('addr', 'add', f'10.231.{k}.1/24', 'dev', host)
      _ip('link', 'set', host, 'up')
      _ip('netns', 'exec', name, 'ip', 'addr', 'add', f'10.231.{k}.2/24',
          'dev', inner)
      _ip('netns', 'exec', name, 'ip', 'link', 'set', inner, 'up')
      _ip('netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up')
  except subprocess.CalledProcessError as e:
    _remove(made)
    pytest.skip(f'network namespaces cannot be made here: {e.stderr.strip()}')
  return [(name, f'10.231.{k}.2:{_PORT}') for k, name in enumerate(made)]


def _remove(namespaces):
  """Kills every process left in each namespace (a worker's worker_binary
  outlives a killed run_worker.py), then deletes it and its veth pair."""
  for name in namespaces:
    pids = _ip('netns', 'pids', name, check=False).stdout.split()
    for pid in pids:
      try:
        os.kill(int(pid), signal.SIGKILL)
      except (ProcessLookupError, ValueError):
        pass
    _ip('netns', 'delete', name, check=False)


@pytest.fixture
def namespaced_workers():
  spaces = _namespaces_or_skip(2)
  processes = []
  try:
    for name, address in spaces:
      processes.append(subprocess.Popen(
          ['ip', 'netns', 'exec', name, sys.executable,
           os.path.join(repository.ROOT, 'run_worker.py'),
           f'--listen={address}'],
          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    addresses = [address for _, address in spaces]
    deadline = time.time() + 120
    for address, process in zip(addresses, processes):
      while not remote_execution.answers(address, 2.0):
        assert process.poll() is None, process.stderr.read()[-2000:]
        assert time.time() < deadline, f'{address} never answered'
    yield addresses
  finally:
    for process in processes:
      process.kill()
      process.wait()
    names = [name for name, _ in spaces]
    _remove(names)
    for name in names:  # nothing of the test outlives it
      assert name not in _ip('netns', 'list').stdout


def test_workers_in_their_own_network_namespaces_give_the_local_results(
    namespaced_workers, tmp_path):
  """The run in this process: the workers are what is remote, and they stay
  alive; the driver's process makes no difference to what it computes."""
  for address in namespaced_workers:  # not reachable but over its link
    assert not address.startswith('127.')
  out = str(tmp_path / 'out')
  pinned_runs.run(_SETTING, out, (
      f'--workers={",".join(namespaced_workers)}',
      f'--worker_data={tmp_path / "digits.sqlite"}'), in_process=True)
  with open(pinned_runs.PINNED_FILE) as f:
    pinned = json.load(f)
  test_remote_workers.assert_local_results(
      f'{_SETTING} on 2 namespaced workers', _SETTING,
      pinned_runs.collect(out), pinned)

"""The TFF worker of a default (local) run: reachable from this machine only,
and gone when its driver is killed, as run_worker.py's is with it; a run whose
worker is killed ends naming it, and resumes; and a worker never shares a port.

TFF 0.87's own local context starts `worker_binary` listening on every
interface ([::]:PORT) and leaves it running (orphaned, still listening) when
the driver is killed with SIGKILL; runtime.py starts it through
`workers.start_worker` instead.
"""

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time

import portpicker
import psutil
import pytest

from tests import repository
from tff_hdp.simulation import remote_execution
from tff_hdp.simulation import worker_shim
from tff_hdp.simulation import workers

pytestmark = pytest.mark.tf


def _worker_processes(driver: psutil.Process) -> list[psutil.Process]:
  try:
    children = driver.children(recursive=True)
  except psutil.NoSuchProcess:
    return []
  return [c for c in children if c.name() == 'worker_binary']


def _is_loopback(ip: str) -> bool:
  address = ipaddress.ip_address(ip.split('%')[0])
  if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
    address = address.ipv4_mapped
  return address.is_loopback


def test_a_default_run_listens_on_loopback_only_and_dies_with_its_driver(
    tmp_path):
  run = subprocess.Popen(
      [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
       '--task=digits', '--algorithms=fedhdp', '--rounds=500',
       '--clients_per_round=20', '--checkpoint_every=0',
       f'--output_dir={tmp_path / "out"}'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  driver = psutil.Process(run.pid)
  deadline = time.time() + 300
  found = []
  try:
    while not found:
      assert run.poll() is None, 'the run ended before its worker was seen'
      assert time.time() < deadline, 'no TFF worker started'
      found = [(w, workers.listening_addresses(w.pid))
               for w in _worker_processes(driver)]
      found = [(w, addresses) for w, addresses in found if addresses]
      time.sleep(0.1)
    for worker, addresses in found:
      assert all(_is_loopback(ip) for ip, _ in addresses), addresses
    driver_addresses = workers.listening_addresses(run.pid)
    assert all(_is_loopback(ip) for ip, _ in driver_addresses), (
        driver_addresses)
  finally:
    run.send_signal(signal.SIGKILL)
    run.wait()
  _, alive = psutil.wait_procs([w for w, _ in found], timeout=10)
  assert not alive, f'worker outlived its killed driver: {alive}'


def test_a_killed_run_worker_takes_its_worker_along_and_frees_the_port():
  # An orphan kept the port and went on serving runs, seen by no one.
  address = f'{workers.LOOPBACK}:{portpicker.pick_unused_port()}'
  server = subprocess.Popen(
      [sys.executable, os.path.join(repository.ROOT, 'run_worker.py'),
       f'--listen={address}'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    assert remote_execution.answers(address, 120), 'run_worker.py never served'
    [worker] = _worker_processes(psutil.Process(server.pid))
  finally:
    server.send_signal(signal.SIGKILL)
    server.wait()
  _, alive = psutil.wait_procs([worker], timeout=5)
  for orphan in alive:  # not left holding the port after a failure
    orphan.kill()
  assert not alive, f'worker outlived its killed run_worker.py: {alive}'
  with socket.socket() as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC
    probe.bind(workers.parse_address(address))  # raises if still held


# The worker dies while the run is stopped after round 3's row
# (`repository.run_losing_its_worker`); round 4 meets the loss, and resumes.
_ROUNDS = 4


def _rows(output_dir):
  return repository.rounds_rows(output_dir, 'fedhdp_r0.5')


def test_a_killed_local_worker_ends_the_run_with_one_line_and_it_resumes(
    tmp_path):
  """The run whose worker is killed ends with `os._exit`: in a process of
  its own. The resume runs in this process, on its worker: the claim on it
  is what it reads and writes."""
  # TFF retries a call to a dead worker forever; a sweep (reproduce.py)
  # waiting on such a run waited forever too. The kernel's out-of-memory
  # killer is what kills a worker in practice.
  out = str(tmp_path / 'out')
  flags = ['--task=digits', '--algorithms=fedhdp', '--r=0.5',
           f'--rounds={_ROUNDS}', '--clients_per_round=20',
           f'--eval_every={_ROUNDS}', '--checkpoint_every=1',
           f'--output_dir={out}']
  command = [sys.executable, os.path.join(repository.ROOT, 'run_experiment.py'),
             *flags]
  killed = []

  def kill_worker(run):
    killed.extend(_worker_processes(psutil.Process(run.pid)))
    for worker in killed:
      worker.send_signal(signal.SIGKILL)

  status, errors, killed_at = repository.run_losing_its_worker(
      command, out, 'fedhdp_r0.5', 3, kill_worker)
  assert 3 <= killed_at < _ROUNDS, 'the kill must land mid-run'
  assert len(killed) == 1
  assert status == 3, errors
  assert errors == [
      f'run_experiment.py: error: the local TFF worker (process '
      f"{killed[0].pid}) was killed (SIGKILL; the kernel's out-of-memory "
      'killer does this when memory runs out: see `dmesg`); run the same '
      'command again to resume from the last checkpoint']

  result = repository.run_program('run_experiment.py', *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = _rows(out)
  assert [int(r['round']) for r in rows] == list(range(1, _ROUNDS + 1))


def test_the_listening_check_finds_a_worker_started_as_tff_starts_it():
  # worker_binary without the shim, as TFF's local context starts it: the
  # check that start_worker applies reports it as reachable elsewhere.
  port = portpicker.pick_unused_port()
  raw = subprocess.Popen([workers.worker_binary(), f'--port={port}'],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 60
    while not workers.listening_addresses(raw.pid):
      assert time.time() < deadline and raw.poll() is None
      time.sleep(0.05)
    assert workers.exposed_addresses(raw.pid, workers.LOOPBACK)
  finally:
    workers.stop_process(raw)
  shimmed = workers.start_worker(port, workers.LOOPBACK, die_with_parent=True,
                                 stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
  try:
    assert workers.listening_addresses(shimmed.pid)
    assert not workers.exposed_addresses(shimmed.pid, workers.LOOPBACK)
  finally:
    workers.stop_process(shimmed)


def _worker_without_checks(port):
  """worker_binary with the shim, as start_worker runs it, but without the
  check before it: what a second worker does if it races the first."""
  env = dict(os.environ, LD_PRELOAD=worker_shim.installed_library(),
             TFF_HDP_BIND_ADDRESS=workers.LOOPBACK)
  return subprocess.run([workers.worker_binary(), f'--port={port}'], env=env,
                        capture_output=True, text=True, timeout=60)


def test_a_port_in_use_is_refused_not_shared():
  # gRPC sets SO_REUSEPORT, with which a second worker would share the
  # port and take some of the first one's connections.
  port = portpicker.pick_unused_port()
  first = workers.start_worker(port, workers.LOOPBACK, die_with_parent=True,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
  try:
    with pytest.raises(workers.WorkerStartError) as raised:
      workers.start_worker(port, workers.LOOPBACK, die_with_parent=True)
    assert str(raised.value) == (
        f'cannot listen on 127.0.0.1:{port}: another process listens there')
    second = _worker_without_checks(port)
    assert 'Address already in use' in second.stderr
    assert 'listening on' not in second.stderr
    assert [p for _, p in workers.listening_addresses(first.pid)] == [port]
  finally:
    workers.stop_process(first)


@pytest.mark.parametrize('listen, reason', [
    ('127.0.0.1:{port}', 'another process listens there'),
    ('192.0.2.1:{port}', 'Cannot assign requested address'),  # TEST-NET-1
])
def test_run_worker_on_an_address_it_cannot_take_is_one_line(listen, reason):
  port = portpicker.pick_unused_port()
  listen = listen.format(port=port)
  holder = socket.socket()
  holder.bind((workers.LOOPBACK, port))
  holder.listen()
  try:
    result = subprocess.run(
        [sys.executable, os.path.join(repository.ROOT, 'run_worker.py'),
         f'--listen={listen}'], capture_output=True, text=True, timeout=120)
  finally:
    holder.close()
  assert result.returncode == 2, result.stderr
  assert result.stderr.strip().splitlines() == [
      f'run_worker.py: error: --listen={listen}: cannot listen on {listen}: '
      f'{reason}']

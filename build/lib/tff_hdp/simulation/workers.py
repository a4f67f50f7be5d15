"""TFF worker processes (`worker_binary`): started on the address asked for.

TFF 0.87's `worker_binary` executes any TensorFlow graph a gRPC peer sends
it, without TLS or authentication, and listens on every interface; TFF's
own local context starts one for every run and leaves it running when its
driver is killed. Workers started here load the shim built from
`worker_shim.c` at install time (worker_shim.py), which binds them to the
given address only, keeps gRPC from sharing a port that is in use, and
(`die_with_parent`, as runs and run_worker.py ask) ends them with the process
that started them, however it ends.
`start_worker` then checks what the process actually listens on and refuses
a worker that is reachable elsewhere.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import errno
import os
import socket
import subprocess
import time

import psutil

from tff_hdp.simulation import worker_shim

LOOPBACK = '127.0.0.1'
_READY_SECONDS = 60.0


class WorkerUnavailableError(RuntimeError):
  """A remote TFF worker did not answer in time (names it)."""


class WorkerFailedError(RuntimeError):
  """A remote TFF worker's computation failed (names it and why, one line)."""


class WorkerStartError(RuntimeError):
  """A TFF worker could not be started on this machine (one line: why)."""


def worker_binary() -> str:
  """The `worker_binary` shipped in TFF's wheel (found without importing
  TFF, so that a worker starts in a second)."""
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or spec.origin is None:
    raise WorkerStartError('tensorflow-federated is not installed '
                           '(requirements.txt); run `make install`')
  path = os.path.join(os.path.dirname(spec.origin), 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise WorkerStartError(f'TFF worker binary not found at {path}; '
                           'reinstall tensorflow-federated (requirements.txt)')
  return path


def parse_address(text: str) -> tuple[str, int]:
  """'host:port' or '[v6]:port' -> (host, port); ValueError if malformed."""
  host, sep, port = text.strip().rpartition(':')
  host = host[1:-1] if host.startswith('[') and host.endswith(']') else host
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f'{text!r} is not host:port')
  return host, int(port)


def listening_addresses(pid: int) -> list[tuple[str, int]]:
  """(ip, port) of every TCP socket process `pid` listens on."""
  try:
    connections = psutil.Process(pid).net_connections(kind='inet')
  except (psutil.NoSuchProcess, psutil.ZombieProcess):
    return []
  return [(c.laddr.ip, c.laddr.port) for c in connections
          if c.status == psutil.CONN_LISTEN]


def _unmapped(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
  address = ipaddress.ip_address(ip.split('%')[0])
  if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
    return address.ipv4_mapped
  return address


def exposed_addresses(pid: int, bind_address: str) -> list[str]:
  """'ip:port' of each socket process `pid` listens on at another address
  than `bind_address` (an IPv4-mapped IPv6 address counts as IPv4)."""
  wanted = ipaddress.ip_address(bind_address)
  return [f'{ip}:{port}' for ip, port in listening_addresses(pid)
          if _unmapped(ip) != wanted]


def _check_can_listen(bind_address: str, port: int) -> None:
  """`WorkerStartError` if `bind_address`:`port` is taken or not an address
  of this machine: one line now, not the worker's gRPC log and exit."""
  family = socket.AF_INET6 if ':' in bind_address else socket.AF_INET
  with socket.socket(family, socket.SOCK_STREAM) as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC
    try:
      probe.bind((bind_address, port))
    except OSError as e:
      why = ('another process listens there' if e.errno == errno.EADDRINUSE
             else e.strerror)
      raise WorkerStartError(
          f'cannot listen on {bind_address}:{port}: {why}') from None


def start_worker(port: int, bind_address: str = LOOPBACK, *,
                 die_with_parent: bool = False,
                 max_concurrent_computation_calls: int = -1,
                 stdout=None, stderr=None) -> subprocess.Popen:
  """Starts `worker_binary` answering on `bind_address`:`port` only.

  Refuses at once an address that is taken or not this machine's. Waits
  until it listens (at most a minute) and checks that it listens on
  `bind_address` and nowhere else; otherwise kills it and raises
  `WorkerStartError`. With `die_with_parent` the kernel kills the worker
  when the thread calling this ends, however it ends (the shim's
  PR_SET_PDEATHSIG): call it from the thread that lives as long as the
  process, as the main one does.
  """
  try:
    shim = worker_shim.installed_library()
  except worker_shim.ShimError as e:
    raise WorkerStartError(str(e)) from None
  _check_can_listen(bind_address, port)
  env = dict(os.environ, LD_PRELOAD=shim,
             TFF_HDP_BIND_ADDRESS=bind_address)
  if die_with_parent:
    env['TFF_HDP_PARENT_PID'] = str(os.getpid())
  process = subprocess.Popen(
      [worker_binary(), f'--port={port}',
       f'--max_concurrent_computation_calls={max_concurrent_computation_calls}'],
      env=env, stdout=stdout, stderr=stderr)
  deadline = time.monotonic() + _READY_SECONDS
  while True:
    listening = listening_addresses(process.pid)
    if listening or process.poll() is not None:
      break
    if time.monotonic() > deadline:
      break
    time.sleep(0.05)
  elsewhere = exposed_addresses(process.pid, bind_address)
  if not listening or elsewhere:
    stop_process(process)
    if elsewhere:
      raise WorkerStartError(
          f'TFF worker listened on {", ".join(elsewhere)}, not only on '
          f'{bind_address}:{port}; stopped it.')
    raise WorkerStartError(
        f'TFF worker did not start listening on {bind_address}:{port} (exit '
        f'status {process.returncode}; is the port in use?)')
  return process


def stop_process(process: subprocess.Popen, timeout: float = 5.0) -> None:
  """SIGTERM, then SIGKILL after `timeout` seconds."""
  if process.poll() is None:
    process.terminate()
    try:
      process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()

"""TFF worker processes (`worker_binary`): started on the address asked for.

TFF 0.87's `worker_binary` executes any TensorFlow graph a gRPC peer sends
it, without TLS or authentication, and listens on every interface; TFF's
own local context starts one for every run and leaves it running when its
driver is killed. Workers started here load `worker_shim.c` (compiled once
with the system's C compiler, cached by its hash), which binds them to the
given address only and, for the driver's own local worker, ends them with
the driver however it ends. `start_worker` then checks what the process
actually listens on and refuses a worker that is reachable elsewhere.
"""

from __future__ import annotations

import hashlib
import importlib.util
import ipaddress
import os
import shutil
import subprocess
import tempfile
import time

import psutil

SHIM_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'worker_shim.c')
LOOPBACK = '127.0.0.1'
_READY_SECONDS = 60.0


class WorkerUnavailableError(RuntimeError):
  """A remote TFF worker did not answer in time (names it)."""


def worker_binary() -> str:
  """The `worker_binary` shipped in TFF's wheel (found without importing
  TFF, so that a worker starts in a second)."""
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or spec.origin is None:
    raise RuntimeError('tensorflow-federated is not installed '
                       '(requirements.txt).')
  path = os.path.join(os.path.dirname(spec.origin), 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise RuntimeError(f'TFF worker binary not found at {path}; reinstall '
                       'tensorflow-federated (requirements.txt).')
  return path


def _cache_dir() -> str:
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'tff_hdp')


def shim_library() -> str:
  """The compiled shim (built on first use, then reused)."""
  with open(SHIM_SOURCE, 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]
  path = os.path.join(_cache_dir(), f'worker_shim-{digest}.so')
  if os.path.isfile(path):
    return path
  compiler = os.environ.get('CC') or shutil.which('cc') or shutil.which('gcc')
  if compiler is None:
    raise RuntimeError(
        'no C compiler (cc) found: the TFF worker is confined to the address '
        f'it is given by a small library built once from {SHIM_SOURCE}; '
        'install gcc (e.g. apt-get install gcc) or set CC.')
  os.makedirs(_cache_dir(), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix='.so', dir=_cache_dir())
  os.close(fd)
  result = subprocess.run(
      [compiler, '-shared', '-fPIC', '-O2', '-o', tmp, SHIM_SOURCE, '-ldl'],
      capture_output=True, text=True, check=False)
  if result.returncode != 0:
    os.remove(tmp)
    raise RuntimeError(f'building {SHIM_SOURCE} with {compiler} failed:\n'
                       f'{result.stderr}')
  os.replace(tmp, path)
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


def start_worker(port: int, bind_address: str = LOOPBACK, *,
                 die_with_parent: bool = False,
                 max_concurrent_computation_calls: int = -1,
                 stdout=None, stderr=None) -> subprocess.Popen:
  """Starts `worker_binary` answering on `bind_address`:`port` only.

  Waits until it listens (at most a minute) and checks that it listens on
  `bind_address` and nowhere else; otherwise kills it and raises.
  """
  env = dict(os.environ, LD_PRELOAD=shim_library(),
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
      raise RuntimeError(f'TFF worker listened on {", ".join(elsewhere)}, not '
                         f'only on {bind_address}:{port}; stopped it.')
    raise RuntimeError(f'TFF worker did not start listening on '
                       f'{bind_address}:{port} (exit status '
                       f'{process.returncode}; is the port in use?)')
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

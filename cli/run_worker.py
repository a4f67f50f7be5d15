"""Starts a TFF worker that a driver's --workers runs rounds on.

Usage: python run_worker.py --listen=ADDRESS:PORT

Runs TensorFlow Federated 0.87's C++ worker (`worker_binary`), answering on
ADDRESS only (an IP address of this machine, e.g. its private network's, or
127.0.0.1 behind an SSH tunnel), until Ctrl-C or SIGTERM. It ends with this
process however that ends (`kill -9` included): an orphaned worker would
keep the port and serve runs with nothing showing it. The worker runs any
TensorFlow computation a connecting driver sends and its protocol has no TLS
or authentication: never give it an address that untrusted machines reach.
Every machine needs the same pinned install (`make install`, which also
builds the library that keeps the worker on ADDRESS; no compiler at run time).

Example, two workers on one machine and a driver using both:
  python run_worker.py --listen=127.0.0.1:8001 &
  python run_worker.py --listen=127.0.0.1:8002 &
  python run_experiment.py --workers=127.0.0.1:8001,127.0.0.1:8002
"""

from __future__ import annotations

import ipaddress
import signal
import sys

from tff_hdp.cli import entry  # first: names a Python without the stack in one line

from absl import flags as absl_flags  # pylint: disable=g-bad-import-order
from tff_hdp.simulation import workers

LISTEN = absl_flags.DEFINE_string(
    'listen', None, 'ADDRESS:PORT to answer on; ADDRESS is an IP address of '
    'this machine (not 0.0.0.0 or ::, which would answer on every network).')
MAX_CALLS = absl_flags.DEFINE_integer(
    'max_concurrent_computation_calls', -1, 'Passed to worker_binary: calls '
    'run at once (-1: no limit).')


def _address() -> tuple[str, int]:
  if not LISTEN.value:
    raise entry.InputError('--listen is required, e.g. --listen=127.0.0.1:8001')
  try:
    host, port = workers.parse_address(LISTEN.value)
    address = ipaddress.ip_address(host)
  except ValueError as e:
    raise entry.InputError(f'--listen: {e}; write an IP address and a port, '
                           'e.g. --listen=10.0.0.5:8001') from None
  if address.is_unspecified:
    raise entry.InputError(f'--listen={LISTEN.value}: give the address of '
                           'one interface; a wildcard answers every network.')
  return host, port


def main(argv: list[str]) -> None:
  del argv
  host, port = _address()
  try:
    process = workers.start_worker(
        port, host, die_with_parent=True,
        max_concurrent_computation_calls=MAX_CALLS.value)
  except workers.WorkerStartError as e:
    raise entry.InputError(f'--listen={LISTEN.value}: {e}') from None
  # Before the line that says it listens: a SIGTERM sent on that line stops
  # the worker with status 0, as the docstring says.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
  print(f'TFF worker listening on {LISTEN.value} (pid {process.pid}); '
        'Ctrl-C stops it.', flush=True)
  try:
    status = process.wait()
  except KeyboardInterrupt:
    status = 0
  finally:
    workers.stop_process(process)
  print('TFF worker stopped.' if status == 0 else
        f'TFF worker exited with status {status}.', flush=True)
  sys.exit(status)


def run() -> None:
  """The command line."""
  entry.run(main, __doc__,
            [('run_worker.py', ['listen', 'max_concurrent_computation_calls'])],
            _address, needs_tensorflow=False)


if __name__ == '__main__':
  run()

"""run_worker.py starts TFF's C++ worker without importing TensorFlow: it
only starts and watches `worker_binary`, and the import cost each worker
machine seconds and about 480 MB for the worker's whole life.

Checked in a process where TensorFlow cannot be imported (a stand-in package
that raises comes first on its path): the worker serves, and SIGTERM stops
it and frees its port, as run_worker.py's docstring says.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import portpicker
import pytest

from tests import repository
from tff_hdp.simulation import workers


def test_run_worker_serves_and_stops_without_tensorflow(tmp_path):
  stand_in = repository.tensorflow_stand_in(
      str(tmp_path), 'run_worker.py imported TensorFlow')
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [stand_in] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
  address = f'{workers.LOOPBACK}:{portpicker.pick_unused_port()}'
  server = subprocess.Popen(
      [sys.executable, os.path.join(repository.ROOT, 'run_worker.py'),
       f'--listen={address}'], env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  try:
    first = server.stdout.readline()
    if not first.startswith(f'TFF worker listening on {address} '):
      server.kill()
      pytest.fail(f'run_worker.py did not start: {first!r}, '
                  f'{server.communicate()[1][-2000:]}')
    deadline = time.monotonic() + 60
    while True:  # the worker's port takes connections
      try:
        socket.create_connection(workers.parse_address(address), 1).close()
        break
      except OSError:
        assert time.monotonic() < deadline, f'{address} never listened'
        time.sleep(0.1)
    server.send_signal(signal.SIGTERM)  # at once: it said it listens
    out, err = server.communicate(timeout=60)
  finally:
    if server.poll() is None:
      server.kill()
      server.wait()
  assert server.returncode == 0, err
  assert 'Traceback' not in err, err
  assert not out.strip(), out
  with socket.socket() as probe:  # the worker went with it
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC
    probe.bind(workers.parse_address(address))  # raises if still held

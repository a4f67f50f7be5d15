"""Bytes the driver sends its TFF workers per round, counted at the socket.

Two workers are started on 127.0.0.1, each behind a TCP relay of this script
that counts the bytes going each way; `run_experiment.py --workers` talks to
the relays. Each setting runs with its examples sent every round (the
default for a task held in memory) and with `--worker_data` (the workers read
the round's clients from an SqlClientData file themselves). A round's bytes
are the difference between a run of --rounds_high and one of --rounds_low
rounds, divided by the extra rounds: start-up (sending the computations,
writing the file, the first evaluation) cancels out. Both runs evaluate only
at their last round.

  .venv/bin/python benchmarks/worker_bytes.py
  .venv/bin/python benchmarks/worker_bytes.py --settings=trusted_mnist
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The paper-scale settings: FeO2's non-IID MNIST (Table 3: 100 clients a
# round of 2,000, cohorts of 64) and Robust-HDP's Fashion-MNIST (20 clients,
# all every round).
SETTINGS = {
    'trusted_mnist': (
        '--task=mnist_noniid', '--epsilons=3.6', '--deltas=1e-4',
        '--opt_out_fraction=0.05', '--r=0.01', '--clients_per_round=100',
        '--cohort_size=64'),
    'untrusted_fmnist': (
        '--task=fashion_mnist_iid', '--num_clients=20', '--algorithms=weiavg',
        '--dp_sgd_clip=3', '--deltas=1e-4', '--epsilon_distribution=dist1'),
}
_SETTINGS = flags.DEFINE_list('settings', list(SETTINGS),
                              f'Which of {", ".join(SETTINGS)}.')
_LOW = flags.DEFINE_integer('rounds_low', 2, 'Rounds of the shorter run.')
_HIGH = flags.DEFINE_integer('rounds_high', 4, 'Rounds of the longer run.')


class CountingRelay:
  """Listens on a free loopback port and relays every connection to
  `target`, counting bytes sent towards it (`up`) and back (`down`)."""

  def __init__(self, target: tuple[str, int]):
    self._target = target
    self._listener = socket.create_server(('127.0.0.1', 0))
    self.address = '127.0.0.1:%d' % self._listener.getsockname()[1]
    self.up = self.down = 0
    self._lock = threading.Lock()
    threading.Thread(target=self._accept, daemon=True).start()

  def _accept(self):
    while True:
      client, _ = self._listener.accept()
      server = socket.create_connection(self._target)
      threading.Thread(target=self._relay, args=(client, server),
                       daemon=True).start()

  def _relay(self, client: socket.socket, server: socket.socket):
    selector = selectors.DefaultSelector()
    selector.register(client, selectors.EVENT_READ, (server, 'up'))
    selector.register(server, selectors.EVENT_READ, (client, 'down'))
    try:
      while True:
        for key, _ in selector.select():
          data = key.fileobj.recv(1 << 20)
          if not data:
            return
          peer, direction = key.data
          peer.sendall(data)
          with self._lock:
            setattr(self, direction, getattr(self, direction) + len(data))
    except OSError:
      return
    finally:
      client.close()
      server.close()

  def reset(self):
    with self._lock:
      self.up = self.down = 0


def _run(setting: str, rounds: int, relays, extra: tuple[str, ...],
         output_dir: str) -> tuple[int, int]:
  for relay in relays:
    relay.reset()
  command = [sys.executable, os.path.join(_ROOT, 'run_experiment.py'),
             *SETTINGS[setting], f'--rounds={rounds}', f'--eval_every={rounds}',
             '--checkpoint_every=0',
             f'--workers={",".join(r.address for r in relays)}',
             f'--output_dir={output_dir}', *extra]
  result = subprocess.run(command, capture_output=True, text=True)
  if result.returncode:
    raise SystemExit(f'{setting} failed:\n{result.stderr[-3000:]}')
  return sum(r.up for r in relays), sum(r.down for r in relays)


def main(argv):
  del argv
  from tff_hdp.simulation import workers  # pylint: disable=g-import-not-at-top
  import portpicker  # pylint: disable=g-import-not-at-top
  scratch = tempfile.mkdtemp(prefix='worker_bytes_')
  ports = [portpicker.pick_unused_port() for _ in range(2)]
  processes = [workers.start_worker(p, workers.LOOPBACK, die_with_parent=True,
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL) for p in ports]
  relays = [CountingRelay((workers.LOOPBACK, p)) for p in ports]
  extra_rounds = _HIGH.value - _LOW.value
  print(f'Bytes per round, driver to its 2 TFF workers (and back), from '
        f'runs of {_HIGH.value} minus {_LOW.value} rounds:\n')
  print('| setting | clients sent as | MB to workers per round | '
        'MB back per round |')
  print('|---|---|---|---|')
  try:
    for setting in _SETTINGS.value:
      data_file = os.path.join(scratch, f'{setting}.sqlite')
      for mode, extra in (('examples', ()),
                          ('ids and orders (--worker_data)',
                           (f'--worker_data={data_file}',))):
        counts = [_run(setting, rounds, relays, extra,
                       os.path.join(scratch, f'{setting}-{rounds}-{len(extra)}'))
                  for rounds in (_LOW.value, _HIGH.value)]
        up = (counts[1][0] - counts[0][0]) / extra_rounds / 1e6
        down = (counts[1][1] - counts[0][1]) / extra_rounds / 1e6
        print(f'| {setting} | {mode} | {up:.3f} | {down:.3f} |', flush=True)
  finally:
    for process in processes:
      workers.stop_process(process)


if __name__ == '__main__':
  entry.run(main, __doc__, [('worker_bytes.py', [
      'settings', 'rounds_low', 'rounds_high'])])

"""Seconds from a command's start to the end of its first round on a large
ClientData file as TFF's own writer lays it out, tff-hdp beside TFF's own
training loop on the same file.

The file (`--shape`), `--clients` clients, written as
`tff.simulation.datasets.save_to_sql_client_data` writes them: without an
index (written here with SQLite directly: TFF's writer takes hours at 10^5
clients). Cached under $TFF_HDP_CACHE, so reruns do not write it again.
- population: the `population` task's data (5-20 training examples of 20
  features, 10 classes), every tenth a test client ('test' split) and the
  rest training clients ('train'), each id in one split
  (`split_names_by_client_id`).
- emnist: federated EMNIST's layout, every writer with 'train' and 'test'
  examples of its own, of 28x28 float pixels in [0, 1) and labels in
  [0, 62), at a twentieth of EMNIST's counts (197 training and 23 test
  examples per writer on average): 5-15 training examples, and a ninth of
  that, at least 1, for testing; 4.6 GB at 10^5 clients (SQLite keeps a
  row a page). The pixels are 784 floats under 'x' and the label under
  'y', the names `--client_data` reads (TFF's EMNIST names them 'pixels'
  and 'label'; `--client_data` refuses those).

Both sides train the model `--client_data` picks: a softmax regression from
the features to the classes.

Timed, each a fresh process, `--repeats` times (median):
- tff: TFF's own loop: `SqlClientData(file, 'train')`, that softmax
  regression, `build_unweighted_fed_avg` with `DifferentiallyPrivateFactory.
  gaussian_adaptive`, 100 clients drawn at random, one round.
- tff-hdp: `run_experiment.py --client_data=FILE --rounds=1
  --clients_per_round=100 --deltas=1e-7 --cohort_size=64` (FedHDP, accounting, the server test set read,
  the round, its evaluation and files).
on the unindexed file (tff-hdp builds its indexed copy once: the first
run's time is shown apart; TFF's loop scans the file for every client) and
on the same file with an index.

CPU seconds (the command's, its reaped children's and its TFF worker's)
beside wall seconds: on 2 shared cores wall time is as much the neighbours'
load as the command's own.

  .venv/bin/python benchmarks/client_data_setup.py --clients=100000
  .venv/bin/python benchmarks/client_data_setup.py --shape=emnist \\
      --clients=100000
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import process_cpu  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402

_CLIENTS = flags.DEFINE_integer('clients', 100_000, 'Clients in the file.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed runs of each command.')
_COHORT_SIZE = flags.DEFINE_integer('cohort_size', 64, "tff-hdp's "
                                   '--cohort_size (0: one TFF client per '
                                   'client).')
_SHAPE = flags.DEFINE_enum('shape', 'population', ['population', 'emnist'],
                           'The clients\' data and layout (module '
                           'docstring).')
_FILES = flags.DEFINE_multi_enum('files', ['unindexed', 'indexed'],
                                 ['unindexed', 'indexed'], 'Which of the '
                                 'two files to time (at 10^5 EMNIST-shaped '
                                 'clients TFF\'s loop scans 4.6 GB per '
                                 'client of the unindexed one: 15 minutes a '
                                 'run on 2 loaded cores).')
_TFF_LOOP = flags.DEFINE_string('tff_loop', None, 'Internal: run TFF\'s own '
                                'loop on this file and exit.')


def _write_population(path: str, num_clients: int) -> None:
  """The population's clients, each id in one split, without an index."""
  from tff_hdp.tasks import client_data  # pylint: disable=g-import-not-at-top
  from tff_hdp.tasks import population  # pylint: disable=g-import-not-at-top
  tmp = f'{path}.{os.getpid()}.tmp'
  with sqlite3.connect(tmp) as con:
    con.execute('CREATE TABLE examples (split_name TEXT NOT NULL, client_id '
                'TEXT NOT NULL, serialized_example_proto BLOB NOT NULL)')
    con.execute('CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
                'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL)')
    # pylint: disable-next=protected-access
    for start, x, y, owner, _ in population._chunks(num_clients, 0):
      rows = client_data.example_rows(x, y)
      ids = [population.client_id(start + k) for k in range(owner.max() + 1)]
      split = ['test' if (start + k) % 10 == 9 else 'train'
               for k in range(len(ids))]
      con.executemany('INSERT INTO examples VALUES (?, ?, ?)',
                      ((split[o], ids[o], r.tobytes())
                       for o, r in zip(owner, rows)))
      counts = [int(n) for n in
                __import__('numpy').bincount(owner, minlength=len(ids))]
      con.executemany('INSERT INTO client_metadata VALUES (?, ?, ?)',
                      zip(ids, split, counts))
  os.replace(tmp, path)


_EMNIST_CLASSES = 62
_EMNIST_CHUNK = 1000  # clients


def _write_emnist(path: str, num_clients: int) -> None:
  """EMNIST-shaped writers, each with train and test examples, without an
  index."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_hdp.tasks import client_data  # pylint: disable=g-import-not-at-top

  def chunks():
    for k, start in enumerate(range(0, num_clients, _EMNIST_CHUNK)):
      rng = np.random.default_rng([0, k])
      m = min(_EMNIST_CHUNK, num_clients - start)
      n_train = rng.integers(5, 16, m)
      counts = n_train + np.maximum(1, np.rint(n_train / 9)).astype(int)
      owner = np.repeat(np.arange(m), counts)
      yield ([f'f{start + i:07d}' for i in range(m)],
             rng.random((len(owner), 28 * 28), np.float32),
             rng.integers(0, _EMNIST_CLASSES, len(owner)), owner, n_train)

  client_data.write_sql(path, chunks(), indexed=False)


# --shape: (its writer, features, classes).
_SHAPES = {'population': (_write_population, 20, 10),
           'emnist': (_write_emnist, 28 * 28, _EMNIST_CLASSES)}


def _tff_loop(path: str) -> None:
  """TFF's own loop on the file: one round of DP-FedAvg, 100 clients."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  import tensorflow_federated as tff
  # pylint: enable=g-import-not-at-top
  _, features, classes = _SHAPES[_SHAPE.value]
  data = tff.simulation.datasets.SqlClientData(path, split_name='train')
  spec = {'x': tf.io.FixedLenFeature([features], tf.float32),
          'y': tf.io.FixedLenFeature([], tf.int64)}

  def client_dataset(client_id):
    return data.create_tf_dataset_for_client(client_id).batch(10).map(
        lambda s: (tf.io.parse_example(s, spec)['x'],
                   tf.io.parse_example(s, spec)['y']))

  def model_fn():
    keras = tf.keras.Sequential([tf.keras.layers.InputLayer((features,)),
                                 tf.keras.layers.Dense(classes)])
    return tff.learning.models.from_keras_model(
        keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True),
        input_spec=(tf.TensorSpec([None, features], tf.float32),
                    tf.TensorSpec([None], tf.int64)))

  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=tff.aggregators.DifferentiallyPrivateFactory
      .gaussian_adaptive(1.0, 100))
  state = process.initialize()
  clients = np.random.default_rng().choice(data.client_ids, 100,
                                           replace=False)
  process.next(state, [client_dataset(c) for c in clients])


def _session_cpu(session: int) -> float:
  """CPU seconds of the live processes of `session` (TFF's worker, left
  running by its launcher and reparented, in no reaped count)."""
  return sum(cpu for _, in_session, cpu in
             process_cpu.live_processes().values() if in_session == session)


def _seconds(command: list[str]) -> tuple[float, float]:
  """(wall, CPU) seconds of `command`, in a session of its own that is
  killed after it: TFF's own launcher leaves its worker running at exit,
  holding the command's output open (so that is a file, not a pipe). CPU
  counts the command, the children it reaped and what is left of its
  session (TFF's worker) at its end, so both sides' workers are in it."""
  with tempfile.TemporaryFile('w+') as errors:
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                               stderr=errors, cwd=ROOT,
                               start_new_session=True)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime + _session_cpu(process.pid)
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    if process.returncode:
      errors.seek(0)
      raise RuntimeError(f'{command} failed: {errors.read()[-2000:]}')
  return seconds, cpu


def main(argv):
  del argv
  if _TFF_LOOP.value:
    _tff_loop(_TFF_LOOP.value)
    return
  from tff_hdp import tasks  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  cache = tasks.cache_dir()
  os.makedirs(cache, exist_ok=True)
  prefix = {'population': 'tff_layout', 'emnist': 'emnist_layout'}[
      _SHAPE.value]
  plain = os.path.join(cache, f'{prefix}-{_CLIENTS.value}.sqlite')
  if not os.path.exists(plain):
    _SHAPES[_SHAPE.value][0](plain, _CLIENTS.value)
  indexed = os.path.join(cache, f'{prefix}-{_CLIENTS.value}-indexed.sqlite')
  if not os.path.exists(indexed):
    shutil.copyfile(plain, f'{indexed}.tmp')
    with sqlite3.connect(f'{indexed}.tmp') as con:
      con.execute('CREATE INDEX examples_by_client ON examples '
                  '(client_id, split_name)')
    os.replace(f'{indexed}.tmp', indexed)
  python = sys.executable
  out = tempfile.mkdtemp()

  def ours(path):
    # delta below 1/N for any file size up to 10^6 clients.
    return [python, 'run_experiment.py', f'--client_data={path}',
            '--rounds=1', '--clients_per_round=100', '--deltas=1e-7',
            f'--cohort_size={_COHORT_SIZE.value}',
            f'--output_dir={tempfile.mkdtemp(dir=out)}']

  rows = []
  for name, path in (('unindexed (as TFF writes it)', plain),
                     ('indexed', indexed)):
    if name.split()[0] not in _FILES.value:
      continue
    first = None
    if path == plain:  # the copy is built by the first run only
      for copy in os.listdir(cache):
        if copy.startswith('client_data-'):
          os.remove(os.path.join(cache, copy))
      first, _ = _seconds(ours(path))
    tff_times, our_times = [], []
    for _ in range(_REPEATS.value):  # alternated: both under the same load
      tff_times.append(_seconds([python, __file__, f'--tff_loop={path}',
                                 f'--shape={_SHAPE.value}']))
      our_times.append(_seconds(ours(path)))
    theirs = [statistics.median(t) for t in zip(*tff_times)]
    mine = [statistics.median(t) for t in zip(*our_times)]
    rows.append([name, f'{os.path.getsize(path) / 2**20:.0f}',
                 f'{theirs[0]:.1f}', f'{theirs[1]:.1f}',
                 f'{mine[0]:.1f}', f'{mine[1]:.1f}',
                 '-' if first is None else f'{first:.1f}',
                 f'{mine[1] / theirs[1]:.2f}'])
    print(rows[-1], flush=True)
  shutil.rmtree(out, ignore_errors=True)
  print(f'\n{_CLIENTS.value} clients ({_SHAPE.value}), 100 a round, '
        'tff-hdp with '
        f'--cohort_size={_COHORT_SIZE.value}; seconds from the start of the '
        'command to the end of round 1 (wall, and CPU of the command and '
        f'its TFF worker), median of {_REPEATS.value}.\n')
  print(tables.markdown_table(
      ['file', 'MB', "TFF's own loop, wall", "TFF's own loop, CPU",
       'tff-hdp, wall', 'tff-hdp, CPU', 'tff-hdp, first run, wall',
       'CPU ratio'], rows))


if __name__ == '__main__':
  entry.run(main, __doc__)

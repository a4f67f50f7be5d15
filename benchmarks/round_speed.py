"""Seconds per round: FedHDP vs TFF's DP-FedAvg vs a plain-TensorFlow floor.

Same data (an MNIST-shaped non-IID task generated here: 784 features, 10
classes, 30 examples per client, one class per client), same softmax
regression model, 1 local epoch of SGD with batch 10, at several
clients-per-round values:

  (a) this project's FedHDP LearningProcess, 2 privacy groups, with cohort
      simulation (`tff_hdp.learning.cohort`: up to --cohort_size clients per TFF
      client; packing the round's data is timed too);
  (a1) the same FedHDP with one TFF client per client (`fedhdp.build_fedhdp`);
  (b) TFF's `build_unweighted_fed_avg` with
      `DifferentiallyPrivateFactory.gaussian_adaptive`;
  (c) a plain-TF floor: the same local SGD per client as a `tf.function`,
      clipping and per-group noisy means in plain TensorFlow, no TFF;
  (v) the vectorized floor: every sampled client's local SGD in one batched
      graph (one batched matmul per local step for all clients), the same
      clipping, noise and group means, no TFF, no loop over clients;
  (t) TFF's data path alone: the round's cohorts packed as in (a) and sent
      to a TFF computation that only reads one number from each, no
      training: what (a) pays to move the examples into TFF's worker.

Each cell is the median over measured rounds after warm-up rounds (tracing);
gathering a round's data is timed in every column. GFLOP/s counts the
forward and backward matmuls of local training (4 FLOP per parameter per
example and epoch), the work every column must do. Memory is the peak
resident set of this process plus TFF's worker.

  .venv/bin/python benchmarks/round_speed.py --clients_per_round=10,50,100,200
  .venv/bin/python benchmarks/round_speed.py --clients_per_round=100,1000,10000 \
      --num_clients=10000 --paths=a --paths=v
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402

_CLIENTS_PER_ROUND = flags.DEFINE_list('clients_per_round',
                                       ['10', '50', '100', '200'],
                                       'Clients per round to measure.')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Measured rounds per cell.')
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Unmeasured rounds per cell.')
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 2000, 'Population.')
_EXAMPLES = flags.DEFINE_integer('examples_per_client', 30,
                                 'Examples per client.')
_PATHS_ALL = ('a', 'a1', 'b', 'c', 'v', 't')
# The paths that train, whose GFLOP/s the table reports.
_TRAINING_PATHS = ('a', 'a1', 'b', 'c', 'v')
_PATHS = flags.DEFINE_multi_enum(
    'paths', list(_PATHS_ALL), _PATHS_ALL,
    'Columns to measure (e.g. only a and v at 10,000 clients per round, '
    'where the per-client paths take minutes a round).')
_COHORT_SIZE = flags.DEFINE_integer(
    'cohort_size', 64, 'Most clients one TFF client simulates in (a).')
_BATCH = 10
_NOISE = 1.0


def _data(num_clients: int, examples: int, seed: int = 0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  means = rng.normal(0, 1, size=(10, 784)).astype('float32')
  xs, ys = [], []
  for c in range(num_clients):
    label = c % 10
    xs.append((means[label] + rng.normal(0, 1, size=(examples, 784))
               ).astype('float32'))
    ys.append(np.full(examples, label, 'int32'))
  return xs, ys


def _keras_model():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(784,)),
      tf.keras.layers.Dense(10, kernel_initializer='zeros')])


def _rss_bytes() -> int:
  import psutil  # pylint: disable=g-import-not-at-top
  me = psutil.Process()
  procs = [me] + me.children(recursive=True)
  total = 0
  for p in procs:
    try:
      total += p.memory_info().rss
    except psutil.Error:
      pass
  return total


def _measure(step, rounds: int, warmup: int):
  """Median seconds of `step(round)` after warm-up, and peak RSS."""
  peak = 0
  times = []
  for r in range(warmup + rounds):
    start = time.perf_counter()
    step(r)
    if r >= warmup:
      times.append(time.perf_counter() - start)
    peak = max(peak, _rss_bytes())
  return statistics.median(times), peak


def _tff_runner(process, datasets, m: int, with_groups: bool):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning import client_work  # pylint: disable=g-import-not-at-top
  state = [process.initialize()]
  n = len(datasets)

  def step(r):
    ids = np.random.default_rng(r).choice(n, m, replace=False)
    if with_groups:
      data = [client_work.make_client_data(
          datasets[i], np.eye(2, dtype='float32')[int(i % 20 == 0)])
              for i in ids]
    else:
      data = [datasets[i] for i in ids]
    state[0] = process.next(state[0], data).state

  return step


def _cohort_round(xs, ys, m: int, cohort_size: int, r: int):
  """Round r's m sampled clients packed as cohorts (1 in 20 non-private)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning import cohort  # pylint: disable=g-import-not-at-top
  ids = np.random.default_rng(r).choice(len(xs), m, replace=False)
  eye = np.eye(2, dtype='float32')
  return cohort.pack_round([(xs[i], ys[i]) for i in ids],
                           [eye[int(i % 20 == 0)] for i in ids], 2,
                           cohort_size)


def _cohort_runner(process, xs, ys, m: int, cohort_size: int):
  state = [process.initialize()]

  def step(r):
    data = _cohort_round(xs, ys, m, cohort_size, r)
    state[0] = process.next(state[0], data).state

  return step


def _transport_runner(xs, ys, m: int, cohort_size: int, spec):
  """(t): each cohort's TFF client returns one number of its examples."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning import cohort  # pylint: disable=g-import-not-at-top
  data_type = cohort.cohort_data_type(spec, 2)

  @tff.tensorflow.computation(data_type)
  def first_value(cohort_data):
    x = cohort_data.get_single_element()[cohort.DATA_KEY][0]
    return x[0, 0, 0]

  @tff.federated_computation(tff.FederatedType(data_type, tff.CLIENTS))
  def receive(data):
    return tff.federated_sum(tff.federated_map(first_value, data))

  def step(r):
    receive(_cohort_round(xs, ys, m, cohort_size, r))

  return step


def _floor_runner(xs, ys, m: int):
  """Plain TF: per-client tf.function SGD, clip, two noisy group means."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = _keras_model()
  weights = [tf.Variable(w) for w in model.get_weights()]
  local = [tf.Variable(w) for w in model.get_weights()]
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  clip = tf.Variable(0.1)

  @tf.function
  def client_update(x, y):
    for v, w in zip(local, weights):
      v.assign(w)
    for i in tf.range(0, tf.shape(x)[0], _BATCH):
      bx, by = x[i:i + _BATCH], y[i:i + _BATCH]
      with tf.GradientTape() as tape:
        loss = loss_fn(by, tf.matmul(bx, local[0]) + local[1])
      for v, g in zip(local, tape.gradient(loss, local)):
        v.assign_sub(0.1 * g)
    delta = [w - v for v, w in zip(local, weights)]
    norm = tf.linalg.global_norm(delta)
    clipped, _ = tf.clip_by_global_norm(delta, clip, use_norm=norm)
    return clipped, tf.cast(norm <= clip, tf.float32)

  @tf.function
  def server_update(sums, counts, bits, expected):
    for v, s_p, s_np in zip(weights, sums[0], sums[1]):
      noisy = (s_p + tf.random.normal(tf.shape(s_p)) * _NOISE * clip) / (
          expected[0])
      mean_np = s_np / tf.maximum(counts[1], 1.0)
      w_p = expected[0] / (expected[0] + counts[1])
      v.assign_sub(w_p * noisy + (1 - w_p) * mean_np)
    frac = (bits + tf.random.normal([])) / (expected[0] + expected[1])
    clip.assign(clip * tf.exp(-0.2 * (frac - 0.5)))

  n = len(xs)

  def step(r):
    ids = np.random.default_rng(r).choice(n, m, replace=False)
    sums = [[tf.zeros_like(w) for w in weights] for _ in range(2)]
    counts = [0.0, 0.0]
    bits = 0.0
    for i in ids:
      g = int(i % 20 == 0)
      clipped, bit = client_update(xs[i], ys[i])
      sums[g] = [s + c for s, c in zip(sums[g], clipped)]
      counts[g] += 1
      bits += float(bit)
    server_update(sums, tf.constant(counts), tf.constant(bits),
                  tf.constant([0.95 * m, 0.05 * m]))

  return step


def _vectorized_floor_runner(xs, ys, m: int):
  """Plain TF, all m clients at once: per-client weights stacked [m, ...]."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  all_x, all_y = np.stack(xs), np.stack(ys)
  model = _keras_model()
  weights = [tf.Variable(w) for w in model.get_weights()]
  clip = tf.Variable(0.1)
  examples = all_x.shape[1]

  @tf.function
  def round_fn(x, y, private, expected):
    kernel = tf.tile(weights[0][None], [m, 1, 1])
    bias = tf.tile(weights[1][None], [m, 1])
    for i in range(0, examples, _BATCH):
      bx, by = x[:, i:i + _BATCH], y[:, i:i + _BATCH]
      with tf.GradientTape() as tape:
        tape.watch([kernel, bias])
        logits = tf.einsum('mbi,mio->mbo', bx, kernel) + bias[:, None]
        # Each client's mean loss; their sum has each client's own gradient.
        loss = tf.reduce_sum(tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(by, logits), 1))
      grad_kernel, grad_bias = tape.gradient(loss, [kernel, bias])
      kernel -= 0.1 * grad_kernel
      bias -= 0.1 * grad_bias
    deltas = [weights[0][None] - kernel, weights[1][None] - bias]
    norms = tf.sqrt(tf.add_n([tf.reduce_sum(tf.reshape(d * d, [m, -1]), 1)
                              for d in deltas]))
    scale = tf.minimum(1.0, clip / tf.maximum(norms, 1e-12))
    count_np = tf.reduce_sum(1.0 - private)
    w_p = expected[0] / (expected[0] + count_np)
    for v, d in zip(weights, deltas):
      clipped = tf.tensordot(scale * private, d, axes=1)
      noisy = (clipped + tf.random.normal(tf.shape(v)) * _NOISE * clip) / (
          expected[0])
      mean_np = tf.tensordot(scale * (1.0 - private), d, axes=1) / tf.maximum(
          count_np, 1.0)
      v.assign_sub(w_p * noisy + (1 - w_p) * mean_np)
    bits = tf.reduce_sum(tf.cast(norms <= clip, tf.float32))
    frac = (bits + tf.random.normal([])) / (expected[0] + expected[1])
    clip.assign(clip * tf.exp(-0.2 * (frac - 0.5)))

  n = len(xs)
  expected = tf.constant([0.95 * m, 0.05 * m])

  def step(r):
    ids = np.random.default_rng(r).choice(n, m, replace=False)
    round_fn(all_x[ids], all_y[ids],
             tf.constant((ids % 20 != 0).astype('float32')), expected)

  return step


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning import fedhdp  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.learning import cohort  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import CohortHeterogeneousDPFactory  # pylint: disable=g-import-not-at-top
  from tff_hdp.aggregators import HeterogeneousDPFactory  # pylint: disable=g-import-not-at-top

  runtime.init()
  xs, ys = _data(_NUM_CLIENTS.value, _EXAMPLES.value)
  # One tf.data.Dataset per client, for the per-client paths only.
  datasets = ([tf.data.Dataset.from_tensor_slices((x, y)).batch(_BATCH)
               for x, y in zip(xs, ys)]
              if {'a1', 'b'} & set(_PATHS.value) else None)
  spec = (tf.TensorSpec([None, 784], tf.float32),
          tf.TensorSpec([None], tf.int32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        _keras_model(), input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  rows = []
  cells = {}
  for m in [int(v) for v in _CLIENTS_PER_ROUND.value]:
    dp_args = dict(noise_multipliers=[_NOISE, 0.0], ratios=[1.0, 1.0],
                   expected_group_sizes=[0.95 * m, None],
                   initial_clip_norm=0.1, clip_count_stddev=1.0,
                   expected_clients_per_round=float(m))
    def cohorts(m=m, dp_args=dp_args):
      return _cohort_runner(cohort.build_cohort_fedhdp(
          model_fn, CohortHeterogeneousDPFactory(**dp_args), 2,
          tff.learning.optimizers.build_sgdm(0.1), _BATCH), xs, ys, m,
                            _COHORT_SIZE.value)

    def per_client(m=m, dp_args=dp_args):
      return _tff_runner(fedhdp.build_fedhdp(
          model_fn, HeterogeneousDPFactory(**dp_args), 2,
          tff.learning.optimizers.build_sgdm(0.1)), datasets, m,
                         with_groups=True)

    def theirs(m=m):
      return _tff_runner(tff.learning.algorithms.build_unweighted_fed_avg(
          model_fn,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
          server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
          model_aggregator=tff.aggregators.DifferentiallyPrivateFactory
          .gaussian_adaptive(noise_multiplier=_NOISE, clients_per_round=m,
                             clipped_count_stddev=1.0)), datasets, m,
                         with_groups=False)

    runners = {'a': cohorts, 'a1': per_client, 'b': theirs,
               'c': lambda m=m: _floor_runner(xs, ys, m),
               'v': lambda m=m: _vectorized_floor_runner(xs, ys, m),
               't': lambda m=m: _transport_runner(xs, ys, m,
                                                  _COHORT_SIZE.value, spec)}
    results = {name: _measure(runners[name](), _ROUNDS.value, _WARMUP.value)
               for name in _PATHS.value}
    cells[m] = results
    seconds = {k: r[0] for k, r in results.items()}
    flops = 4 * (784 * 10 + 10) * m * _EXAMPLES.value

    def cell(k, digits=3):
      return f'{seconds[k]:.{digits}f}' if k in seconds else '-'

    def ratio(k, base, digits=2):
      return (f'{seconds[k] / seconds[base]:.{digits}f}'
              if k in seconds and base in seconds else '-')

    rows.append([
        m, cell('a'), cell('a1'), cell('b'), cell('c'),
        cell('v', 4), cell('t'), ratio('a', 'b'), ratio('a', 'v', 1),
        ratio('a1', 'b'),
        ' / '.join(f'{flops / seconds[k] / 1e9:.2f}' if k in seconds else '-'
                   for k in _TRAINING_PATHS),
        f'{max(r[1] for r in results.values()) / 2**20:.0f}'])
  header = ['clients/round', 'a: FedHDP cohorts s/round',
            'a1: FedHDP per-client s/round',
            'b: TFF DP-FedAvg s/round', 'c: plain TF s/round',
            'v: vectorized floor s/round',
            't: examples into TFF s/round', 'a/b', 'a/v', 'a1/b',
            'GFLOP/s a / a1 / b / c / v', 'peak RSS MiB']
  print('\n' + tables.markdown_table(header, rows))
  ms = sorted(cells)
  if len(ms) > 1:
    lo, hi = ms[0], ms[-1]
    for k, label in (('a', 'FedHDP cohorts'), ('a1', 'FedHDP per-client'),
                     ('b', 'TFF DP-FedAvg'), ('c', 'plain TF'),
                     ('v', 'vectorized floor')):
      if k in cells[lo]:
        growth = cells[hi][k][0] / cells[lo][k][0]
        print(f'{label}: cost x{growth:.1f} from {lo} to {hi} clients per '
              f'round (clients x{hi / lo:.0f})')


if __name__ == '__main__':
  entry.run(main, __doc__)

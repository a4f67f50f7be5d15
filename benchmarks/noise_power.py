"""Aggregate noise power of Robust-HDP against the oracle and the baselines.

Robust-HDP's Table 2 in miniature (SPEC.md §3): 20 clients, full
participation, one local epoch of real DP-SGD each from the same model, each
client with its own epsilon (from a heterogeneity distribution), batch size
(uniform in {16, 32, 64, 128}) and dataset size. Each client's update and the
noise its DP-SGD actually drew are kept; a rule's aggregate noise power is
`||sum_i w_i noise_i||^2 / (p eta^2)` from that drawn noise, beside the
expected `sum_i w_i^2 sigma_i^2 / (p eta^2)`. Robust-HDP's weights come from
the same RPCA estimate its aggregator runs, on the matrix of updates alone.

  .venv/bin/python benchmarks/noise_power.py
"""

from __future__ import annotations

import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from cli import entry  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from tff_hdp.privacy.plans import plan_clients
from tff_hdp.learning import dp_sgd  # noqa: E402
from tff_hdp.privacy import heterogeneity  # noqa: E402
from tff_hdp.aggregators import rpca  # noqa: E402
from tff_hdp.learning import algorithms  # noqa: E402
from tff_hdp.learning import noise_aware  # noqa: E402
from tff_hdp.aggregators import robust_hdp  # noqa: E402

_CLIENTS = flags.DEFINE_integer('clients', 20, 'Clients (all participate).')
_ROUNDS = flags.DEFINE_integer(
    'rounds', 100, 'Rounds each client budgets its epsilon over.')
_DELTA = flags.DEFINE_float('delta', 1e-5, 'Every client\'s delta.')
_LR = flags.DEFINE_float('lr', 0.05, 'Client learning rate eta.')
_CLIP = flags.DEFINE_float('clip', 1.0, 'Per-example clip norm c.')
_BLOCK_ROWS = flags.DEFINE_integer('block_rows', 200_000,
                                   'RPCA rows per block.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed.')

FEATURES, HIDDEN, CLASSES = 64, 64, 10
DISTRIBUTIONS = ('mixgauss1', 'mixgauss2', 'mixgauss3', 'uniform')
RULES = ('weiavg', 'dpfedavg', 'min_epsilon', 'robust_hdp', 'oracle')
LABELS = {'weiavg': 'WeiAvg', 'dpfedavg': 'DPFedAvg',
          'min_epsilon': 'minimum eps', 'robust_hdp': 'Robust-HDP',
          'oracle': 'Oracle (1/sigma^2)'}


def _model() -> tff.learning.models.VariableModel:
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
      tf.keras.layers.Dense(HIDDEN, activation='tanh'),
      tf.keras.layers.Dense(CLASSES),
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def _client_data(rng, sizes):
  """Non-identical clients of one softmax teacher with shifted inputs."""
  teacher = rng.normal(size=(FEATURES, CLASSES)) / np.sqrt(FEATURES)
  data = []
  for n in sizes:
    x = rng.normal(size=(n, FEATURES)) + rng.normal(0, 0.5, size=FEATURES)
    y = np.argmax(x @ teacher + rng.gumbel(size=(n, CLASSES)), axis=1)
    data.append(tf.data.Dataset.from_tensor_slices(
        (x.astype(np.float32), y.astype(np.int32))).batch(256))
  return data


def _train_all(train, initial, data, plans, seed):
  updates, noises = [], []
  for i, (dataset, plan) in enumerate(zip(data, plans)):
    # Tensors, not Python numbers, so the tf.function is traced once.
    update, noise = train(initial, dataset,
                          tf.constant(plan.noise_multiplier, tf.float32),
                          tf.constant(plan.sampling_rate, tf.float32),
                          tf.constant(plan.steps_per_round, tf.int32),
                          tf.constant([seed, i], tf.int64))
    updates.append(np.concatenate([u.numpy().ravel() for u in update]))
    noises.append(np.concatenate([v.numpy().ravel() for v in noise]))
  return np.stack(updates), np.stack(noises)


def main(argv):
  del argv
  n, eta, clip = _CLIENTS.value, _LR.value, _CLIP.value
  rng = np.random.default_rng(_SEED.value)
  sizes = rng.integers(300, 1001, n)
  data = _client_data(rng, sizes)
  batch_sizes = heterogeneity.sample_batch_sizes(n, _SEED.value)
  tf.keras.utils.set_random_seed(_SEED.value)
  model = _model()
  train = dp_sgd.build_local_dp_sgd(
      model, lambda y, p: tf.keras.losses.sparse_categorical_crossentropy(
          y, p, from_logits=True), eta, clip)
  initial = tf.nest.map_structure(
      lambda v: tf.constant(v.numpy()),
      tff.learning.models.ModelWeights.from_model(model))
  p = sum(int(np.prod(v.shape)) for v in initial.trainable)

  measured = {r: {} for r in RULES}
  expected = {r: {} for r in RULES}
  checks = []
  for d, name in enumerate(DISTRIBUTIONS):
    distribution = (heterogeneity.Uniform(1.0, 10.0) if name == 'uniform' else
                    heterogeneity.EPSILON_DISTRIBUTIONS[name])
    epsilons, _ = heterogeneity.sample_epsilons(distribution, n,
                                                _SEED.value + d)
    trained = {}  # Calibrate and train once per set of epsilons.
    for rule in RULES:
      min_eps = algorithms.REGISTRY[rule].min_epsilon
      if min_eps not in trained:
        plans = plan_clients(noise_aware.client_epsilons(rule, epsilons),
                             _DELTA.value,
                                              sizes, batch_sizes,
                                              _ROUNDS.value)
        trained[min_eps] = (plans, *_train_all(train, initial, data, plans,
                                               _SEED.value + d))
      plans, updates, noises = trained[min_eps]
      if rule == 'robust_hdp':
        variances, converged, iterations = rpca.blocked_noise_variances(
            updates.T, _BLOCK_ROWS.value)
        weights = robust_hdp.inverse_variance_weights(variances).numpy()
        print(f'{name}: RPCA converged={bool(converged)} after '
              f'{int(iterations)} iterations')
      else:
        raw = np.array([noise_aware.client_weight(rule, q, eta, clip, p)
                        for q in plans])
        weights = raw / raw.sum()
      weights = weights.astype(np.float64)
      sigma2 = np.array([q.update_noise_variance(eta, clip, p) for q in plans])
      measured[rule][name] = np.sum((weights @ noises)**2) / (p * eta**2)
      expected[rule][name] = np.sum(weights**2 * sigma2) / (p * eta**2)
    oracle = measured['oracle'][name]
    ratio = measured['robust_hdp'][name] / oracle
    checks.append((name, ratio,
                   measured['robust_hdp'][name] < min(
                       measured['weiavg'][name], measured['dpfedavg'][name])))

  print(f'\n{n} clients, p = {p}, eta = {eta}, c = {clip}, '
        f'E = {_ROUNDS.value} rounds, delta = {_DELTA.value}')
  for title, table in (('measured from the drawn noise', measured),
                       ('expected, sum w_i^2 sigma_i^2 / (p eta^2)', expected)):
    print(f'\nAggregate noise power per parameter / eta^2 ({title}):')
    print('alg \\ dist'.ljust(20) +
          ''.join(f'{d:>12}' for d in DISTRIBUTIONS))
    for rule in RULES:
      print(f'{LABELS[rule]:<20}' +
            ''.join(f'{table[rule][d]:>12.4g}' for d in DISTRIBUTIONS))
  print()
  ok = True
  for name, ratio, below in checks:
    good = abs(ratio - 1) <= 0.10 and below
    ok &= good
    print(f'{name}: Robust-HDP / oracle = {ratio:.4f}; below WeiAvg and '
          f'DPFedAvg: {below} -> {"OK" if good else "FAIL"}')
  return 0 if ok else 1


if __name__ == '__main__':
  entry.run(main, __doc__)

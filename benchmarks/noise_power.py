"""Robust-HDP's Table 2: the aggregate noise power of each rule, measured.

On a real task (default: Fashion-MNIST, 20 IID clients of 2,400 training
images, as in the paper), every client runs one local epoch of real DP-SGD
from the same model at its own (eps_i, b_i) from each distribution (default:
Robust-HDP's Dist1-Dist9), calibrated by this project's accountant for E
rounds. Each client's update and the noise its DP-SGD actually drew are kept.
A rule's aggregate noise power per parameter, normalized by the learning rate,
is printed three ways:

- measured: `||sum_i w_i noise_i||^2 / (p eta^2)` from the drawn noise;
- formula: `sum_i w_i^2 sigma_i^2 / (p eta^2)`, SPEC.md §3's sigma_i^2 at the
  z this project calibrated;
- the authors' accountant: the same formula at the z of the authors' code
  (`benchmarks/authors_accountant.py`), beside the published table.

Less noise is not yet more progress: a client's epoch takes floor(n_i / b_i)
steps, so the large-batch clients that inverse-variance weights favour also
move the model least. The last table is what a round gains per unit of
noise, measured: `||sum_i w_i (u_i - noise_i)|| / ||sum_i w_i noise_i||`,
the norm of the aggregate's noise-free part (the clipped-gradient steps)
over that of its noise, at the same eta for every rule.

Robust-HDP's weights come from the RPCA estimate its aggregator runs, on the
matrix of updates alone; the oracle's are 1 / sigma_i^2. With --output the
tables are written as JSON for `benchmarks/paper_claims.py
--noise_power_files`, which checks the paper's claims on them.

  .venv/bin/python benchmarks/noise_power.py --output=results/table2.json
"""

from __future__ import annotations

import json
import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from benchmarks import authors_accountant  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402
import numpy as np  # noqa: E402
from tff_hdp import tasks  # noqa: E402

from tff_hdp.learning import algorithms  # noqa: E402
from tff_hdp.privacy import heterogeneity  # noqa: E402
from tff_hdp.privacy import plans  # noqa: E402
from tff_hdp.reporting import published  # noqa: E402

_TASK = flags.DEFINE_enum('task', 'fashion_mnist_iid', sorted(tasks.REGISTRY),
                          'Task whose clients and model are used.')
_DATA_DIR = flags.DEFINE_string(
    'data_dir', None, 'The task\'s data folder (default: its folder under '
    '$TFF_HDP_DATA, else ../shared/data).')
_DISTRIBUTIONS = flags.DEFINE_list(
    'distributions', [f'dist{k}' for k in range(1, 10)],
    f'Epsilon distributions, of {", ".join(heterogeneity.DISTRIBUTIONS)}.')
_ROUNDS = flags.DEFINE_integer(
    'rounds', 200, 'Rounds E each client budgets its epsilon over.')
_DELTA = flags.DEFINE_float('delta', 1e-4, 'Every client\'s delta (the '
                            'authors\' code: 1e-4).')
_LR = flags.DEFINE_float('lr', 0.1, 'Client learning rate eta.')
_CLIP = flags.DEFINE_float('clip', 3.0, 'Per-example clip norm c (the '
                           'authors\' code: 3).')
_BLOCK_ROWS = flags.DEFINE_integer('block_rows', 200_000,
                                   'RPCA rows per block.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the model, the drawn '
                             'distributions and the DP-SGD noise.')
_OUTPUT = flags.DEFINE_string('output', None, 'JSON file for the tables.')

RULES = ('weiavg', 'dpfedavg', 'min_epsilon', 'robust_hdp', 'oracle')
LABELS = {'weiavg': 'WeiAvg', 'dpfedavg': 'DPFedAvg',
          'min_epsilon': 'minimum eps', 'robust_hdp': 'Robust-HDP',
          'oracle': 'Oracle (1/sigma^2)'}


def _train_all(train, initial, data, client_plans, seed):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  updates, noises = [], []
  for i, (examples, plan) in enumerate(zip(data, client_plans)):
    # Tensors, not Python numbers, so the tf.function is traced once.
    update, noise = train(initial, examples,
                          tf.constant(plan.noise_multiplier, tf.float32),
                          tf.constant(plan.sampling_rate, tf.float32),
                          tf.constant(plan.steps_per_round, tf.int32),
                          tf.constant([seed, i], tf.int64))
    updates.append(np.concatenate([u.numpy().ravel() for u in update]))
    noises.append(np.concatenate([v.numpy().ravel() for v in noise]))
  return np.stack(updates), np.stack(noises)


def _authors_variances(epsilons, sizes, batch_sizes, min_epsilon: bool):
  """SPEC §3's sigma_i^2 / (p eta^2) at the authors' z (K_i = 1)."""
  if min_epsilon:
    epsilons = [min(epsilons)] * len(epsilons)
  z = np.array([authors_accountant.noise_multiplier(
      float(e), int(n), int(b), _ROUNDS.value, _DELTA.value)
                for e, n, b in zip(epsilons, sizes, batch_sizes)])
  b = np.asarray(batch_sizes, float)
  return np.ceil(np.asarray(sizes) / b) * (_CLIP.value * z / b)**2


def _power(weights, variances):
  weights = np.asarray(weights, np.float64) / np.sum(weights)
  return float(np.sum(weights**2 * variances))


def _print_table(title, table, distributions,
                 quantity='Aggregate noise power per parameter / eta^2'):
  print(f'\n{quantity} ({title}):')
  print('alg \\ dist'.ljust(20) + ''.join(f'{d:>10}' for d in distributions))
  for rule in RULES:
    if rule in table:
      print(f'{LABELS[rule]:<20}' + ''.join(
          f'{table[rule].get(d, float("nan")):>10.4g}' for d in distributions))


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_hdp.aggregators import robust_hdp
  from tff_hdp.aggregators import rpca
  from tff_hdp.federated_task import TaskOptions
  from tff_hdp.learning import dp_sgd
  from tff_hdp.learning import noise_aware
  from tff_hdp.reporting import paper_claims
  # pylint: enable=g-import-not-at-top
  eta, clip, seed = _LR.value, _CLIP.value, _SEED.value
  task = tasks.load(_TASK.value, TaskOptions(
      data_dir=_DATA_DIR.value or tasks.REGISTRY[_TASK.value].default_data_dir(),
      seed=seed))
  clients = task.client_ids
  data = [tuple(tf.constant(a) for a in task.train_arrays(c)) for c in clients]
  sizes = [task.num_train_examples(c) for c in clients]
  tf.keras.utils.set_random_seed(seed)
  model = task.tff_model_fn()()
  loss = task.loss_fn()
  loss.reduction = tf.keras.losses.Reduction.NONE
  train = dp_sgd.build_local_dp_sgd(model, loss, eta, clip)
  initial = tf.nest.map_structure(
      lambda v: tf.constant(v.numpy()),
      tff.learning.models.ModelWeights.from_model(model))
  p = sum(int(np.prod(v.shape)) for v in initial.trainable)

  measured = {r: {} for r in RULES}
  signal_to_noise = {r: {} for r in RULES}
  formula = {r: {} for r in RULES}
  authors = {r: {} for r in RULES if r != 'robust_hdp'}
  rpca_runs = {}
  for d, name in enumerate(_DISTRIBUTIONS.value):
    epsilons, batch_sizes = heterogeneity.client_budgets(name, len(clients),
                                                         seed + d)
    batch_sizes = np.minimum(batch_sizes, sizes)
    trained = {}  # Calibrate and train once per set of epsilons.
    for rule in RULES:
      min_eps = algorithms.REGISTRY[rule].min_epsilon
      if min_eps not in trained:
        client_plans = plans.plan_clients(
            noise_aware.client_epsilons(rule, epsilons), _DELTA.value, sizes,
            batch_sizes, _ROUNDS.value)
        trained[min_eps] = (client_plans, *_train_all(
            train, initial, data, client_plans, seed + d),
                            _authors_variances(epsilons, sizes, batch_sizes,
                                               min_eps))
      client_plans, updates, noises, theirs = trained[min_eps]
      sigma2 = np.array([q.update_noise_variance(eta, clip, p)
                         for q in client_plans]) / (p * eta**2)
      if rule == 'robust_hdp':
        variances, converged, iterations = rpca.blocked_noise_variances(
            updates.T, _BLOCK_ROWS.value)
        weights = robust_hdp.inverse_variance_weights(variances).numpy()
        rpca_runs[name] = {'converged': bool(converged),
                           'iterations': int(iterations)}
      else:
        weights = np.array([noise_aware.client_weight(rule, q, eta, clip, p)
                            for q in client_plans])
      weights = np.asarray(weights, np.float64) / np.sum(weights)
      noise = weights @ noises
      measured[rule][name] = float(np.sum(noise**2) / (p * eta**2))
      signal_to_noise[rule][name] = float(
          np.linalg.norm(weights @ updates - noise) / np.linalg.norm(noise))
      formula[rule][name] = _power(weights, sigma2)
      if rule in authors:
        authors[rule][name] = _power(
            1 / theirs if rule == 'oracle' else weights, theirs)
    print(f'{name}: done (RPCA converged={rpca_runs[name]["converged"]} after '
          f'{rpca_runs[name]["iterations"]} iterations)', flush=True)

  distributions = _DISTRIBUTIONS.value
  print(f'\n{task.name}: {len(clients)} clients of {min(sizes)}-{max(sizes)} '
        f'examples, p = {p}, eta = {eta}, c = {clip}, E = {_ROUNDS.value} '
        f'rounds, delta = {_DELTA.value}, seed = {seed}')
  _print_table('measured from the drawn noise', measured, distributions)
  _print_table('formula, this project\'s accountant', formula, distributions)
  _print_table('formula, the authors\' accountant', authors, distributions)
  table2 = {r: {d: v for d, v in row.items() if d in distributions}
            for r, row in published.ROBUST_HDP_TABLE2.items()}
  _print_table('published, Robust-HDP Table 2', table2, distributions)
  _print_table(f'measured, eta = {eta}', signal_to_noise, distributions,
               quantity='Aggregate signal / noise, ||sum_i w_i (u_i - '
               'noise_i)|| / ||sum_i w_i noise_i||')
  result = {
      'task': task.name, 'clients': len(clients), 'num_params': p,
      'settings': {'rounds': _ROUNDS.value, 'delta': _DELTA.value,
                   'learning_rate': eta, 'clip_norm': clip, 'seed': seed},
      'distributions': distributions, 'rpca': rpca_runs,
      'measured': measured, 'formula': formula, 'authors_formula': authors,
      'signal_to_noise': signal_to_noise,
  }
  if _OUTPUT.value:
    os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)),
                exist_ok=True)
    with open(_OUTPUT.value, 'w') as f:
      json.dump(result, f, indent=1)
    print(f'\nwrote {_OUTPUT.value}')
  print()
  if paper_claims.print_claims(paper_claims.noise_power_claims(result)):
    sys.exit(1)


if __name__ == '__main__':
  entry.run(main, __doc__)

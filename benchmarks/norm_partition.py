"""Does the GMM on update norms find the clients whose budgets are relaxed?

PDP-FL's Figure 3 as a table (SPEC.md §3): 10 clients of non-IID MNIST (one
digit each), softmax regression, one local epoch of real DP-SGD from the same
model, epsilons from MixGauss1-3 by seed. The server's partition
(`norm_partition.public_by_update_norm`, EM in TF ops, what the PFA rule runs)
is compared with scikit-learn's GaussianMixture on the same log norms (k-means
initialization, best of 10) and with the true split. The true public clients
are those of MixGauss1-2's epsilon-10 component; MixGauss3 has three
components and two readings of "public": its epsilon-10 component, or its
epsilon-1 and epsilon-10 components. Batch sizes are uniform in
{16, 32, 64, 128} as in Robust-HDP (`--batch_size=0`) or one fixed size.

  .venv/bin/python benchmarks/norm_partition.py --data_dir=../shared/data/mnist
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402
import numpy as np  # noqa: E402

from tff_hdp.privacy import heterogeneity  # noqa: E402
from tff_hdp.privacy import plans  # noqa: E402

_DATA_DIR = flags.DEFINE_string('data_dir', None, 'Directory with MNIST.')
_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds of the epsilons.')
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 0, 'Every client\'s batch size; 0 draws each from '
    '{16, 32, 64, 128}.')
_ROUNDS = flags.DEFINE_integer(
    'rounds', 20, 'Rounds each client budgets its epsilon over.')
_DELTA = flags.DEFINE_float('delta', 1e-5, 'Every client\'s delta.')
_LR = flags.DEFINE_float('lr', 0.1, 'Client learning rate.')
_CLIP = flags.DEFINE_float('clip', 1.0, 'Per-example clip norm.')

NUM_CLIENTS = 10
DISTRIBUTIONS = ('mixgauss1', 'mixgauss2', 'mixgauss3')


def _sklearn_public(norms, seed):
  from sklearn import mixture  # pylint: disable=g-import-not-at-top
  logs = np.log(norms)[:, None]
  gmm = mixture.GaussianMixture(2, n_init=10, random_state=seed).fit(logs)
  return gmm.predict(logs) == np.argmin(gmm.means_[:, 0])


def _agreement(public, truth):
  return f'{int(np.sum(public == truth))}/{len(truth)}'


def main(argv):
  del argv
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_hdp.tasks import mnist
  from tff_hdp.tasks import models
  from tff_hdp.aggregators import norm_partition
  from tff_hdp.learning import dp_sgd
  # pylint: enable=g-import-not-at-top
  task = dataclasses.replace(
      mnist.load(_DATA_DIR.value, num_clients=NUM_CLIENTS),
      keras_model_fn=lambda: models.softmax_regression(models.IMAGE_PIXELS,
                                                       10))
  model = task.tff_model_fn()()
  train = dp_sgd.build_local_dp_sgd(
      model, lambda y, p: tf.keras.losses.sparse_categorical_crossentropy(
          y, p, from_logits=True), _LR.value, _CLIP.value)
  initial = tf.nest.map_structure(
      lambda v: tf.constant(v.numpy()),
      tff.learning.models.ModelWeights.from_model(model))
  sizes = [task.num_train_examples(c) for c in task.client_ids]
  print('| dist | seed | batch sizes | true eps (sorted by norm) | '
        'TF = sklearn | truth: top component | truth: eps >= 1 | '
        'EM converged (iterations) |')
  print('|---|---|---|---|---|---|---|---|')
  for name in DISTRIBUTIONS:
    distribution = heterogeneity.EPSILON_DISTRIBUTIONS[name]
    top = len(distribution.means) - 1
    for seed in map(int, _SEEDS.value):
      eps, components = heterogeneity.sample_epsilons(distribution,
                                                      NUM_CLIENTS, seed)
      batch = (np.full(NUM_CLIENTS, _BATCH_SIZE.value) if _BATCH_SIZE.value
               else heterogeneity.sample_batch_sizes(NUM_CLIENTS, seed))
      rows = []
      for i, client in enumerate(task.client_ids):
        plan = plans.plan_client_privacy(eps[i], _DELTA.value, sizes[i],
                                          int(batch[i]), _ROUNDS.value)
        update, _ = train(initial, task.train_dataset(client, seed),
                          tf.constant(plan.noise_multiplier, tf.float32),
                          tf.constant(plan.sampling_rate, tf.float32),
                          tf.constant(plan.steps_per_round, tf.int32),
                          tf.constant([seed, i], tf.int64))
        rows.append(np.concatenate([u.numpy().ravel() for u in update]))
      rows = np.stack(rows)
      public, fit = norm_partition.public_by_update_norm(
          tf.constant(rows, tf.float32))
      public = public.numpy()
      norms = np.linalg.norm(rows, axis=1)
      order = np.argsort(norms)
      eps_text = ' '.join(
          f'{e:.2g}{"*" if p else ""}' for e, p in zip(eps[order],
                                                        public[order]))
      second = (_agreement(public, components >= 1) if top == 2 else '-')
      print(f'| {name} | {seed} | {"/".join(map(str, batch))} | {eps_text} | '
            f'{np.array_equal(public, _sklearn_public(norms, seed))} | '
            f'{_agreement(public, components == top)} | {second} | '
            f'{bool(fit.converged)} ({int(fit.iterations)}) |')
  print('\n* = put in the public cluster by the TF partition.')


if __name__ == '__main__':
  flags.mark_flag_as_required('data_dir')
  entry.run(main, __doc__)

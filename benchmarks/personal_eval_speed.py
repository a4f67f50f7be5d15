"""Seconds to score many clients, each with its own model, on its own tests.

Compares `evaluation.own_model_scores` (stacked weights, one graph for a chunk
of clients) with loading each client's weights into the Keras model and
predicting its test set in turn (how personal models were scored before),
on synthetic MNIST-shaped clients and the 784-200-10 network of the FeO2
MNIST tables (issue: evaluation of 2,000 personal models took about 6 s).
Also checks that both give the same scores.

  .venv/bin/python benchmarks/personal_eval_speed.py --clients=2000
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402

if TYPE_CHECKING:
  from tff_hdp.federated_task import FederatedTask

_CLIENTS = flags.DEFINE_integer('clients', 2000, 'Clients, each with its own '
                                'model.')
_TEST_EXAMPLES = flags.DEFINE_integer('test_examples', 10, 'Mean test '
                                      'examples per client (1 to 2x).')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed calls of each; the '
                                'median is printed.')


def _task(rng) -> FederatedTask:
  # pylint: disable=g-import-not-at-top,redefined-outer-name
  from tff_hdp.tasks import models
  from tff_hdp.federated_task import FederatedTask
  # pylint: enable=g-import-not-at-top,redefined-outer-name
  n = _CLIENTS.value
  sizes = rng.integers(1, 2 * _TEST_EXAMPLES.value, n)
  test = {f'c{i}': (rng.random((m, 784), np.float32),
                    rng.integers(0, 10, m).astype(np.int32))
          for i, m in enumerate(sizes)}
  return FederatedTask(
      name='synthetic', client_train=test, client_test=test,
      server_test=next(iter(test.values())),
      keras_model_fn=lambda: models.one_layer_nn(784, 10),
      loss_fn=None, batch_size=10)


def _one_at_a_time(task, model, weights_of):
  out = {}
  variables = model.trainable_weights + model.non_trainable_weights
  for c, weights in weights_of.items():
    for v, w in zip(variables, weights):
      v.assign(w)
    x, y = task.test_arrays(c)
    out[c] = float(task.metric_record.score(
        model(x, training=False).numpy(), y).mean())
  return out


def _median_seconds(fn):
  times, result = [], None
  for _ in range(_REPEATS.value):
    start = time.perf_counter()
    result = fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times)), result


def main(argv) -> None:
  del argv
  from tff_hdp.simulation import evaluation  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  task = _task(rng)
  model = task.keras_model_fn()
  weights_of = {c: [w + rng.normal(0, 0.05, w.shape).astype(np.float32)
                    for w in model.get_weights()] for c in task.client_ids}
  print(f'load average {os.getloadavg()[0]:.2f}; {len(weights_of)} clients, '
        f'{sum(w.size for w in model.get_weights())} parameters each')
  old, old_scores = _median_seconds(
      lambda: _one_at_a_time(task, model, weights_of))
  new, new_scores = _median_seconds(
      lambda: evaluation.own_model_scores(task, model, weights_of))
  gap = max(abs(old_scores[c] - new_scores[c]) for c in weights_of)
  print(f'one client at a time: {old:.3f} s')
  print(f'own_model_scores:     {new:.3f} s ({old / new:.1f}x faster)')
  print(f'largest score difference: {gap:.2e}')
  if gap > 1e-6:
    sys.exit(1)


if __name__ == '__main__':
  entry.run(main, __doc__)

"""Ditto's personal-model store and step on a real task."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_hdp.tasks import digits
from tff_hdp.learning import client_work
from tff_hdp.learning import ditto

pytestmark = pytest.mark.tf


def test_store_round_trips_bit_for_bit(tmp_path):
  rng = np.random.default_rng(0)
  store = ditto.PersonalModels()
  ids = ['a', 7, ('x', 1)]
  store.update(ids, [[rng.normal(size=(3, 2)).astype(np.float32),
                      rng.normal(size=2).astype(np.float32)] for _ in ids])
  path = str(tmp_path / 'p.npz')
  store.save(path)
  loaded = ditto.PersonalModels.load(path, ids + ['never'])
  assert len(loaded) == 3 and 'never' not in loaded
  for c in ids:
    for w, v in zip(store.get(c, []), loaded.get(c, [])):
      np.testing.assert_array_equal(w, v)
  with pytest.raises(ValueError, match='clients this task does not have'):
    ditto.PersonalModels.load(path, ['a'])


def two_clients_step_inputs(num_groups):
  """(model_fn, data, global weights, personal weights) for a Ditto step
  of two digits clients, the first in group 0 and the second in group 1 of
  `num_groups`, from a random global model and zero personal ones."""
  task = digits.load(clients_per_digit=1, seed=0)
  data = [client_work.make_client_data(task.train_dataset(c, 0),
                                       np.eye(num_groups, dtype=np.float32)[i])
          for i, c in enumerate(task.client_ids[:2])]
  rng = np.random.default_rng(1)
  global_weights = tff.learning.models.ModelWeights(
      [rng.normal(size=(64, 10)).astype(np.float32),
       np.zeros(10, np.float32)], [])
  start = [[np.zeros((64, 10), np.float32), np.zeros(10, np.float32)]] * 2
  return task.tff_model_fn(), data, global_weights, start


def test_lambda_pulls_personal_models_to_the_global_model():
  model_fn, data, global_weights, start = two_clients_step_inputs(2)

  def distance(lambdas):
    step = ditto.build_personalization(model_fn, lambdas, 0.05, epochs=3)
    out = step(global_weights, start, data)
    return [float(np.linalg.norm(np.asarray(o[0]) - global_weights.trainable[0]))
            for o in out]

  free, pulled = distance([0.0, 0.0]), distance([0.0, 5.0])
  assert free[0] == pytest.approx(pulled[0], rel=1e-6)  # group 0: lambda 0
  assert pulled[1] < 0.5 * free[1]  # group 1 is pulled towards theta^t
  with pytest.raises(ValueError, match='lambdas must be >= 0'):
    ditto.build_personalization(model_fn, [-1.0], 0.1)

"""Cross-silo tasks: School and Vehicle files, generated MOCHA .mat, MNIST."""

import json

import numpy as np
import pytest
import scipy.io

from tff_hdp import tasks
from tff_hdp.tasks import cross_silo
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions
from tests import repository

pytestmark = pytest.mark.tf


def _mnist_dir():
  return repository.task_data('rotated_masked_mnist')


def _sizes(clients):
  return [len(y) for _, y in clients.values()]


def test_school_silos_features_and_scaled_scores():
  task = tasks.load('school',
                    TaskOptions(data_dir=repository.task_data('school')))
  assert len(task.client_ids) == 139 and task.metric == 'mse'
  train, test = _sizes(task.client_train), _sizes(task.client_test)
  assert sum(train) + sum(test) == 15362
  assert min(a + b for a, b in zip(train, test)) == 22
  assert abs(sum(test) / 15362 - 0.2) < 0.01
  x, y = task.client_train[task.client_ids[0]]
  assert x.shape[1] == 28 and x.dtype == np.float32 and y.shape[1] == 1
  np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-5)
  scores = np.concatenate([y for _, y in task.client_train.values()])
  assert 0.0 <= scores.min() and scores.max() <= 1.0
  assert task.keras_model_fn()(x).shape == (len(x), 1)


def test_vehicle_from_the_train_only_json_is_split_per_silo():
  task = tasks.load(
      'vehicle', TaskOptions(data_dir=repository.task_data('vehicle')))
  assert len(task.client_ids) == 23 and task.metric == 'sign_accuracy'
  train, test = _sizes(task.client_train), _sizes(task.client_test)
  assert sum(train) + sum(test) == 1860
  for n_train, n_test in zip(train, test):
    assert abs(n_test - 0.25 * (n_train + n_test)) <= 1
  labels = np.concatenate([y for _, y in task.client_train.values()])
  assert set(np.unique(labels)) == {-1.0, 1.0}
  assert task.client_train['f_00000'][0].shape[1] == 100


def _mat_cells(silos, column=False):
  """MATLAB cell arrays X, Y as scipy.io.savemat writes them."""
  shape = (len(silos), 1) if column else (1, len(silos))
  xs, ys = np.empty(shape, object), np.empty(shape, object)
  for k, (x, y) in enumerate(silos):
    xs.flat[k], ys.flat[k] = x, np.asarray(y, float).reshape(-1, 1)
  return {'X': xs, 'Y': ys}


def _svm_silos(rng, sizes, features):
  return [(rng.normal(size=(n, features)), rng.choice([-1, 1], size=n))
          for n in sizes]


@pytest.mark.parametrize('name,file,features,column', [
    ('vehicle', 'vehicle.mat', 100, True),   # MOCHA's vehicle: 23 x 1 cells
    ('gleam', 'gleam.mat', 180, False),      # MOCHA's gleam: 1 x 38 cells
])
def test_mocha_mat_files_with_an_empty_silo(tmp_path, name, file, features,
                                           column):
  rng = np.random.default_rng(0)
  silos = _svm_silos(rng, [40, 0, 12], features)
  silos[1] = (np.zeros((0, features)), np.zeros(0))
  scipy.io.savemat(tmp_path / file, _mat_cells(silos, column))
  task = tasks.load(name, TaskOptions(data_dir=str(tmp_path)))
  assert task.client_ids == ['silo0', 'silo2'] and task.dropped_clients == 1
  assert _sizes(task.client_train) == [30, 9]
  assert _sizes(task.client_test) == [10, 3]
  assert task.server_test[0].shape == (13, features)


def test_vehicle_json_with_its_own_test_file(tmp_path):
  rng = np.random.default_rng(1)
  for split, sizes in (('train', [6, 4]), ('test', [2, 0])):
    silos = dict(zip(['s0', 's1'], _svm_silos(rng, sizes, 3)))
    (tmp_path / f'{split}.json').write_text(json.dumps({
        'users': list(silos), 'num_samples': sizes,
        'user_data': {u: {'x': x.tolist(), 'y': y.tolist()}
                      for u, (x, y) in silos.items()}}))
  task = cross_silo.load_vehicle(str(tmp_path))
  assert task.client_ids == ['s0'] and task.dropped_clients == 1
  assert _sizes(task.client_train) == [6] and _sizes(task.client_test) == [2]


def test_bad_files_are_named(tmp_path):
  rng = np.random.default_rng(2)
  silos = [(rng.normal(size=(4, 3)), [0, 1, 0, 1])]
  scipy.io.savemat(tmp_path / 'gleam.mat', _mat_cells(silos))
  with pytest.raises(ValueError, match='gleam.mat: silo silo0 has labels '
                     'other than -1 and 1'):
    cross_silo.load_gleam(str(tmp_path))
  scipy.io.savemat(tmp_path / 'gleam.mat', {'X': _mat_cells(silos)['X']})
  with pytest.raises(ValueError, match=r"gleam.mat must hold cell arrays X "
                     r"and Y; it holds \['X'\]"):
    cross_silo.load_gleam(str(tmp_path))
  (tmp_path / 'gleam.mat').write_bytes(b'garbage')
  with pytest.raises(ValueError, match='cannot read MATLAB file .*gleam.mat'):
    cross_silo.load_gleam(str(tmp_path))
  with pytest.raises(ValueError, match='school.mat does not exist'):
    cross_silo.load_school(str(tmp_path))
  with pytest.raises(ValueError, match='holds neither vehicle.mat nor '
                     'train.json'):
    cross_silo.load_vehicle(str(tmp_path))
  with pytest.raises(ValueError, match='--data_dir=DIR where DIR holds '
                     'gleam.mat'):
    tasks.load('gleam', TaskOptions())


def test_rotated_masked_mnist_silos():
  task = cross_silo.load_rotated_masked_mnist(_mnist_dir(), num_silos=8,
                                              seed=5)
  assert len(task.client_ids) == 8
  assert set(_sizes(task.client_train)) == {7500}
  assert set(_sizes(task.client_test)) == {1250}
  rotations = [c.split('_')[0] for c in task.client_ids]
  assert sorted(rotations) == sorted(['rot0', 'rot90', 'rot180', 'rot270'] * 2)
  masks = []
  for c in task.client_ids:
    images = np.concatenate([task.client_train[c][0], task.client_test[c][0]])
    masked = (images == 1.0).all(axis=0)  # white in every image: the mask
    # Masks are unions of aligned 2x2 squares, about half the squares.
    cells = masked.reshape(14, 2, 14, 2).all(axis=(1, 3))
    np.testing.assert_array_equal(np.kron(cells, np.ones((2, 2))).ravel(),
                                  masked)
    assert 0.35 < cells.mean() < 0.65
    masks.append(masked)
    assert set(np.bincount(task.client_train[c][1]) > 600) == {True}
  assert len({m.tobytes() for m in masks}) == 8
  assert task.keras_model_fn()(task.server_test[0][:2]).shape == (2, 10)


def test_rotations_turn_the_digits():
  task = cross_silo.load_rotated_masked_mnist(_mnist_dir(), num_silos=4,
                                              mask_ratio=0.0, seed=0)
  means = {c.split('_')[0]: task.client_train[c][0].mean(axis=0).reshape(
      28, 28) for c in task.client_ids}
  for k, name in enumerate(['rot90', 'rot180', 'rot270'], start=1):
    turned = np.rot90(means['rot0'], k=k).ravel()
    match = np.corrcoef(turned, means[name].ravel())[0, 1]
    unturned = np.corrcoef(means['rot0'].ravel(), means[name].ravel())[0, 1]
    assert match > 0.98 and match > unturned + 0.05


@pytest.mark.parametrize('kwargs', [{'num_silos': 6}, {'patch': 3},
                                    {'mask_ratio': 1.5}])
def test_rotated_masked_mnist_rejects_bad_settings(kwargs):
  with pytest.raises(ValueError):
    cross_silo.load_rotated_masked_mnist(_mnist_dir(), **kwargs)


def _one_output_task(metric, y_test):
  x = np.eye(3, dtype=np.float32)
  return FederatedTask(
      name='t', client_train={'a': (x, y_test)}, client_test={'a': (x, y_test)},
      server_test=(x, y_test), keras_model_fn=lambda: None, loss_fn=None,
      batch_size=1, metric=metric)


def test_sign_accuracy_and_mse_scores():
  outputs = np.array([[0.5], [-2.0], [0.0]])
  y = np.array([[1.0], [1.0], [-1.0]], np.float32)
  sign = _one_output_task('sign_accuracy', y).metric_record.score(outputs, y)
  np.testing.assert_array_equal(sign.ravel(), [100.0, 0.0, 0.0])
  mse = _one_output_task('mse', y).metric_record.score(outputs, y)
  np.testing.assert_allclose(mse.ravel(), [0.25, 9.0, 1.0])
  with pytest.raises(ValueError, match="unknown metric 'rmse'"):
    _one_output_task('rmse', y)

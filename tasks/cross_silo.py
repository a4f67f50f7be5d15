"""The MR-MTL paper's cross-silo tasks (SPEC.md §2): few silos, many examples.

School (139 silos, linear regression, MSE), Vehicle (23 silos) and GLEAM (38
silos), both linear SVMs with labels in {-1, 1}, and rotated & masked MNIST
(40 silos in 4 rotation clusters, each silo with its own mask, ConvNet).
School, Vehicle and GLEAM are read from the standard MOCHA `.mat` files (cell
arrays X and Y, one cell per silo); Vehicle also from LEAF-style JSON. Each
silo is split into train/test and standardized with its own training
statistics, following the paper's code; School's exam scores are min-max
scaled from their range [1, 70] as there. The server test set is the union of
the silos' test sets.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import tensorflow as tf

from tff_hdp.tasks import client_arrays
from tff_hdp.tasks import data_files
from tff_hdp.tasks import models
from tff_hdp.federated_task import Arrays
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions

SCHOOL_SCORE_RANGE = (1.0, 70.0)
ROTATIONS = 4
NUM_MNIST_SILOS = 40


def _silo_task(name: str, silos: dict[str, Arrays], test_fraction: float,
               metric: str, loss_fn: Callable[[], tf.keras.losses.Loss],
               batch_size: int, seed: int,
               test_silos: dict[str, Arrays] | None = None) -> FederatedTask:
  """Split (unless `test_silos` are given), standardize, drop empty silos.

  Labels become float32 columns `[n, 1]`, matching the model's one output
  (Keras would broadcast `[n]` against `[n, 1]` in the loss).
  """
  rng = np.random.default_rng(seed)
  train, test = {}, {}
  for silo, (x, y) in silos.items():
    y = y.astype(np.float32).reshape(-1, 1)
    if test_silos is None:
      train[silo], test[silo] = client_arrays.split(x, y, test_fraction, rng)
    else:
      x_test, y_test = test_silos.get(silo, (x[:0], y[:0]))
      train[silo], test[silo] = (x, y), (
          x_test, y_test.astype(np.float32).reshape(-1, 1))
  train, test, dropped = client_arrays.drop_empty(name, train, test)
  for silo in train:
    train[silo], test[silo] = client_arrays.standardize(train[silo],
                                                        test[silo])
  num_features = next(iter(train.values()))[0].shape[1]
  return FederatedTask(
      name=name,
      client_train=train,
      client_test=test,
      server_test=client_arrays.pooled(test),
      keras_model_fn=lambda: models.linear(num_features),
      loss_fn=loss_fn,
      batch_size=batch_size,
      metric=metric,
      dropped_clients=dropped)


def _check_signs(path: str, silos: dict[str, Arrays]) -> None:
  """SVM labels must be -1 or 1; `path` names the file in the error."""
  for silo, (_, y) in silos.items():
    if not np.isin(y, (-1.0, 1.0)).all():
      raise ValueError(f'{path}: silo {silo} has labels other than -1 and 1.')


def _mat_silos(path: str) -> dict[str, Arrays]:
  return {f'silo{k}': arrays
          for k, arrays in enumerate(data_files.read_mat_silos(path))}


class HalfSquaredError(tf.keras.losses.MeanSquaredError):
  """(y - yhat)^2 / 2 per example, the MR-MTL authors' regression loss (the
  paper does not say): the same learning rate and clip norm then take their
  step. The reported metric stays the plain mean squared error."""

  def __init__(self, reduction=tf.keras.losses.Reduction.AUTO,
               name='half_squared_error'):
    super().__init__(reduction=reduction, name=name)

  def call(self, y_true, y_pred):
    return 0.5 * super().call(y_true, y_pred)


def load_school(data_dir: str | None, test_fraction: float = 0.2,
                batch_size: int = 32, seed: int = 0) -> FederatedTask:
  """School from `data_dir/school.mat`: 28 features, exam score, trained on
  `HalfSquaredError`, scored by MSE."""
  data_dir = data_files.require_dir(data_dir, 'school.mat')
  low, high = SCHOOL_SCORE_RANGE
  silos = {s: (x, (y - low) / (high - low))
           for s, (x, y) in _mat_silos(
               os.path.join(data_dir, 'school.mat')).items()}
  return _silo_task('school', silos, test_fraction, 'mse', HalfSquaredError,
                    batch_size, seed)


def _svm_task(name: str, path: str, silos: dict[str, Arrays],
              batch_size: int, seed: int,
              test_silos: dict[str, Arrays] | None = None) -> FederatedTask:
  """A linear SVM (hinge loss) task on ±1 labels, 75%/25% split per silo."""
  _check_signs(path, silos)
  return _silo_task(name, silos, 0.25, 'sign_accuracy', tf.keras.losses.Hinge,
                    batch_size, seed, test_silos)


def load_vehicle(data_dir: str | None, batch_size: int = 64,
                 seed: int = 0) -> FederatedTask:
  """Vehicle from `vehicle.mat`, else from LEAF-style `train.json`.

  With a `test.json` beside `train.json` its silos are the test sets;
  otherwise each silo's training file is split 75%/25%.
  """
  data_dir = data_files.require_dir(
      data_dir, 'vehicle.mat (MOCHA) or train.json [+ test.json] (LEAF '
      'style)')
  mat = os.path.join(data_dir, 'vehicle.mat')
  if os.path.exists(mat):
    return _svm_task('vehicle', mat, _mat_silos(mat), batch_size, seed)
  train_json = os.path.join(data_dir, 'train.json')
  if not os.path.exists(train_json):
    raise ValueError(f'{data_dir} holds neither vehicle.mat nor train.json; '
                     'put the MOCHA vehicle.mat or LEAF-style train.json '
                     '[+ test.json] there.')
  test_json = os.path.join(data_dir, 'test.json')
  test = None
  if os.path.exists(test_json):
    test = data_files.read_leaf_json(test_json)
    _check_signs(test_json, test)
  return _svm_task('vehicle', train_json, data_files.read_leaf_json(train_json),
                   batch_size, seed, test)


def load_gleam(data_dir: str | None, batch_size: int = 64,
               seed: int = 0) -> FederatedTask:
  """GLEAM from `data_dir/gleam.mat`: 180 features, linear SVM."""
  data_dir = data_files.require_dir(data_dir, 'gleam.mat')
  mat = os.path.join(data_dir, 'gleam.mat')
  return _svm_task('gleam', mat, _mat_silos(mat), batch_size, seed)


def _silo_mask(rng: np.random.Generator, mask_ratio: float,
               patch: int) -> np.ndarray:
  """A 28x28 0/1 mask of non-overlapping patch x patch squares, each on with
  probability `mask_ratio`."""
  cells = rng.random((28 // patch, 28 // patch)) < mask_ratio
  return np.kron(cells, np.ones((patch, patch))).astype(np.float32)


def load_rotated_masked_mnist(data_dir: str | None,
                              num_silos: int = NUM_MNIST_SILOS,
                              mask_ratio: float = 0.5, patch: int = 2,
                              batch_size: int = 100,
                              seed: int = 0) -> FederatedTask:
  """Rotated & masked MNIST: shuffled MNIST split evenly over `num_silos`.

  Silos fall into 4 groups rotated by 0, 90, 180 and 270 degrees; each silo
  then whitens its own random set of `patch` x `patch` squares (each with
  probability `mask_ratio`; the paper's "2x2 white patches", its code uses
  7x7 and ratio 0.5) in all its train and test images. 40 silos hold
  1,500 train and 250 test images each.
  """
  if num_silos < ROTATIONS or num_silos % ROTATIONS:
    raise ValueError(f'--num_clients: rotated MNIST needs a positive multiple '
                     f'of {ROTATIONS} silos, got {num_silos}.')
  if patch < 1 or 28 % patch or not 0.0 <= mask_ratio <= 1.0:
    raise ValueError(f'mask patches must divide 28 and the ratio lie in '
                     f'[0, 1]; got {patch} and {mask_ratio}.')
  x_train, y_train, x_test, y_test = data_files.read_mnist(data_dir)
  x_train, x_test = data_files.unit_pixels(x_train), data_files.unit_pixels(
      x_test)
  rng = np.random.default_rng(seed)
  rotation = rng.permutation(np.arange(num_silos) % ROTATIONS)
  parts = []
  for x, y in ((x_train, y_train), (x_test, y_test)):
    order = rng.permutation(len(x))
    per_silo = len(x) // num_silos
    parts.append([(x[idx], y[idx].astype(np.int32)) for idx in (
        order[k * per_silo:(k + 1) * per_silo] for k in range(num_silos))])
  train, test = {}, {}
  for k in range(num_silos):
    mask = _silo_mask(rng, mask_ratio, patch)
    cid = f'rot{90 * rotation[k]}_silo{k}'
    for out, (x, y) in ((train, parts[0][k]), (test, parts[1][k])):
      images = np.maximum(np.rot90(x, k=rotation[k], axes=(1, 2)), mask)
      out[cid] = (images.reshape(len(x), -1).astype(np.float32), y)
  return FederatedTask(
      name='rotated_masked_mnist',
      client_train=train,
      client_test=test,
      server_test=client_arrays.pooled(test),
      keras_model_fn=lambda: models.mrmtl_convnet(10),
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True),
      batch_size=batch_size)


def load_school_task(options: TaskOptions) -> FederatedTask:
  return load_school(options.data_dir, batch_size=options.batch_size,
                     seed=options.seed)


def load_vehicle_task(options: TaskOptions) -> FederatedTask:
  return load_vehicle(options.data_dir, batch_size=options.batch_size,
                      seed=options.seed)


def load_gleam_task(options: TaskOptions) -> FederatedTask:
  return load_gleam(options.data_dir, batch_size=options.batch_size,
                    seed=options.seed)


def load_rotated_masked_mnist_task(options: TaskOptions) -> FederatedTask:
  return load_rotated_masked_mnist(
      options.data_dir, options.num_clients or NUM_MNIST_SILOS,
      batch_size=options.batch_size, seed=options.seed)

"""MNIST tasks (non-IID, skewed, IID) on the real files, and one CLI run; the
file readers' errors on generated files, so they are checked without the data."""

import gzip
import os

import numpy as np
import pytest

from tff_hdp import tasks
from tff_hdp.tasks import data_files
from tff_hdp.tasks import mnist
from tff_hdp.federated_task import TaskOptions
from tests import repository

pytestmark = pytest.mark.tf

ROOT = repository.ROOT


def _mnist_dir():
  return repository.task_data('mnist_noniid')


@pytest.fixture(scope='module')
def task():
  return mnist.load(_mnist_dir(), num_clients=100, seed=3)


def test_each_client_holds_one_digit_in_equal_numbers(task):
  assert len(task.client_ids) == 100
  digits = {}
  for c in task.client_ids:
    (x, y), (_, y_test) = task.client_train[c], task.client_test[c]
    assert x.shape[1:] == (784,) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert len(set(y)) == 1 and set(y_test) == set(y)
    digits[c] = int(y[0])
  assert np.bincount(list(digits.values())).tolist() == [10] * 10
  # The rarest digit (5: 5,421 images) bounds the equal client size.
  sizes = {len(task.client_train[c][1]) + len(task.client_test[c][1])
           for c in task.client_ids}
  assert sizes == {5421 // 10}
  assert {len(task.client_test[c][1]) for c in task.client_ids} == {108}
  x_server, y_server = task.server_test
  assert x_server.shape == (10000, 784) and len(y_server) == 10000
  assert task.opt_out_pool is None and task.metric == 'accuracy'
  assert task.keras_model_fn()(x_server[:2]).shape == (2, 10)


def test_clients_are_disjoint_and_seeded(task):
  seen = np.concatenate([task.client_train[c][0] for c in task.client_ids])
  assert len(np.unique(seen, axis=0)) > 0.99 * len(seen)
  again = mnist.load(_mnist_dir(), num_clients=100, seed=3)
  c = task.client_ids[17]
  np.testing.assert_array_equal(again.client_train[c][0],
                                task.client_train[c][0])


def test_iid_split_shards_the_training_set_with_every_digit():
  task = tasks.load('mnist_iid',
                    TaskOptions(data_dir=_mnist_dir(), seed=4))
  assert len(task.client_ids) == 20 and task.name == 'mnist_iid'
  sizes = [len(task.client_train[c][1]) + len(task.client_test[c][1])
           for c in task.client_ids]
  assert sizes == [3000] * 20
  assert {len(task.client_test[c][1]) for c in task.client_ids} == {600}
  train_labels = np.concatenate([task.client_train[c][1]
                                 for c in task.client_ids])
  # A shuffled split: every client sees every digit, in MNIST's proportions.
  for c in task.client_ids:
    assert len(set(task.client_train[c][1])) == 10
  np.testing.assert_allclose(np.bincount(train_labels) / len(train_labels),
                             np.bincount(data_files.read_mnist(_mnist_dir())[1])
                             / 60000, atol=0.005)
  seen = np.concatenate([task.client_train[c][0] for c in task.client_ids]
                        + [task.client_test[c][0] for c in task.client_ids])
  assert len(np.unique(seen, axis=0)) > 0.99 * 60000
  again = mnist.load_iid(_mnist_dir(), seed=4)
  np.testing.assert_array_equal(again.client_train['client7'][0],
                                task.client_train['client7'][0])
  other = mnist.load_iid(_mnist_dir(), seed=5)
  assert not np.array_equal(other.client_train['client7'][1],
                            task.client_train['client7'][1])
  with pytest.raises(ValueError, match='at least 1 client'):
    mnist.load_iid(_mnist_dir(), num_clients=0)


def test_fashion_mnist_iid_is_fashion_mnist_in_twenty_shards_of_2400():
  fashion_dir = repository.task_data('fashion_mnist_iid')
  task = tasks.load('fashion_mnist_iid', TaskOptions(data_dir=fashion_dir))
  assert task.name == 'fashion_mnist_iid' and len(task.client_ids) == 20
  # Robust-HDP's clients: 3,000 images each, 2,400 of them to train on.
  assert {len(task.client_train[c][1]) for c in task.client_ids} == {2400}
  assert {len(task.client_test[c][1]) for c in task.client_ids} == {600}
  x_train, y_train, x_test, _ = data_files.read_mnist(fashion_dir)
  # Fashion-MNIST, not MNIST: 6,000 training images of each of 10 classes.
  assert np.bincount(y_train).tolist() == [6000] * 10
  assert not np.array_equal(x_train[:100],
                            data_files.read_mnist(_mnist_dir())[0][:100])
  assert task.server_test[0].shape == (len(x_test), 784)
  assert task.keras_model_fn()(task.server_test[0][:2]).shape == (2, 10)
  with pytest.raises(ValueError, match='Fashion-MNIST IDX files'):
    mnist.load_iid(str(fashion_dir) + '/nothing', dataset='fashion_mnist')


def test_fashion_mnist_noniid_gives_each_client_one_class():
  fashion_dir = repository.task_data('fashion_mnist_noniid')
  task = tasks.load('fashion_mnist_noniid',
                    TaskOptions(data_dir=fashion_dir, num_clients=100))
  assert task.name == 'fashion_mnist_noniid' and len(task.client_ids) == 100
  x_train, y_train, _, _ = data_files.read_mnist(fashion_dir)
  for c in task.client_ids:
    labels = np.concatenate([task.client_train[c][1], task.client_test[c][1]])
    # One class each, the one its id names, as --levels_by_label reads it.
    assert set(labels) == {int(c[len('digit'):c.index('_')])}, c
  # 6,000 images a class over 10 clients a class: 600 each, all distinct
  # Fashion-MNIST training images.
  sizes = {len(task.client_train[c][1]) + len(task.client_test[c][1])
           for c in task.client_ids}
  assert sizes == {600}
  rows = np.concatenate([task.client_train[c][0] for c in task.client_ids])
  assert len(np.unique(rows, axis=0)) == len(rows)
  first = task.client_ids[0]
  label = int(task.client_train[first][1][0])
  of_label = {r.tobytes() for r in mnist.flat_images(x_train[y_train == label])}
  assert all(r.tobytes() in of_label for r in task.client_train[first][0])
  with pytest.raises(ValueError, match='non-IID Fashion-MNIST needs a '
                     'positive multiple of 10'):
    mnist.load(fashion_dir, num_clients=15, dataset='fashion_mnist')


def test_full_size_default_and_skewed_opt_out_pool():
  task = tasks.load('mnist_noniid_skewed',
                    TaskOptions(data_dir=_mnist_dir()))
  assert len(task.client_ids) == 2000
  assert {len(task.client_train[c][1]) for c in task.client_ids} == {22}
  assert len(task.opt_out_pool) == 200
  assert all(set(task.client_train[c][1]) == {7} for c in task.opt_out_pool)


def test_idx_files_give_the_same_data_as_the_npz(tmp_path):
  for name in data_files.MNIST_IDX_FILES:
    os.symlink(os.path.join(_mnist_dir(), name), tmp_path / name)
  from_idx = data_files.read_mnist(str(tmp_path))
  from_npz = data_files.read_mnist(_mnist_dir())
  for a, b in zip(from_idx, from_npz):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('num_clients', [0, 15, 25])
def test_client_count_must_be_a_multiple_of_ten(num_clients):
  with pytest.raises(ValueError, match='multiple of 10'):
    mnist.load(_mnist_dir(), num_clients=num_clients)


def test_missing_data_says_what_to_put_where(tmp_path):
  with pytest.raises(ValueError, match='--data_dir=DIR where DIR holds '
                     'mnist.npz'):
    tasks.load('mnist_noniid', TaskOptions())
  with pytest.raises(ValueError, match='does not exist'):
    mnist.load(str(tmp_path / 'nowhere'))
  (tmp_path / 'a_file').write_text('')
  with pytest.raises(ValueError, match='a_file is a file, not a folder; it '
                     'must be a folder holding mnist.npz'):
    mnist.load(str(tmp_path / 'a_file'))
  with pytest.raises(ValueError, match='holds neither mnist.npz nor .*'
                     'train-images-idx3-ubyte.gz'):
    mnist.load(str(tmp_path))


def test_malformed_npz_is_named(tmp_path):
  (tmp_path / 'mnist.npz').write_bytes(b'not a zip file')
  with pytest.raises(ValueError, match='cannot read .*mnist.npz'):
    data_files.read_mnist(str(tmp_path))
  np.savez(tmp_path / 'mnist.npz', x_train=np.zeros((2, 28, 28)))
  with pytest.raises(ValueError, match=r"mnist.npz lacks keys \['y_train'"):
    data_files.read_mnist(str(tmp_path))


def _write_idx(path, array):
  """`array` (uint8) as a gzipped IDX file: magic 0,0,8,ndim, then the
  big-endian dimensions, then the bytes (the format of yann.lecun.com)."""
  header = bytes([0, 0, 8, array.ndim]) + b''.join(
      int(d).to_bytes(4, 'big') for d in array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


def test_generated_idx_files_are_read_back_and_truncation_is_named(tmp_path):
  rng = np.random.default_rng(0)
  arrays = (rng.integers(0, 256, (3, 28, 28)), rng.integers(0, 10, 3),
            rng.integers(0, 256, (2, 28, 28)), rng.integers(0, 10, 2))
  for name, array in zip(data_files.MNIST_IDX_FILES, arrays):
    _write_idx(tmp_path / name, array)
  for read, written in zip(data_files.read_mnist(str(tmp_path)), arrays):
    np.testing.assert_array_equal(read, written)
    assert read.dtype == np.uint8
  with gzip.open(tmp_path / 'train-labels-idx1-ubyte.gz', 'wb') as f:
    f.write(b'\0\0\x08\x01\0\0\0\x10abc')
  with pytest.raises(ValueError,
                     match='train-labels-idx1-ubyte.gz is truncated'):
    data_files.read_mnist(str(tmp_path))


def test_cli_trains_on_mnist_and_prints_the_table(tmp_path):
  result = repository.run_program(  # what the run prints: in this process
      'run_experiment.py', '--task=mnist_noniid', f'--data_dir={_mnist_dir()}',
      '--num_clients=40', '--algorithms=dp_fedavg,fedhdp', '--rounds=2',
      '--clients_per_round=10', '--clip_count_stddev=3', '--eval_every=1',
      f'--output_dir={tmp_path}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'mnist_noniid: 40 clients' in result.stdout
  assert '| Algorithm' in result.stdout and '| fedhdp ' in result.stdout
  assert os.path.exists(os.path.join(tmp_path, 'results.csv'))


def _write_npz(directory, x_train, y_train, x_test=None, y_test=None):
  np.savez(os.path.join(directory, 'mnist.npz'), x_train=x_train,
           y_train=y_train,
           x_test=x_train[:2] if x_test is None else x_test,
           y_test=y_train[:2] if y_test is None else y_test)


@pytest.mark.parametrize('labels,images,message', [
    ([3, 99], None, r'MNIST train data in .*: 1 labels outside the classes '
     r'0-9 \(e.g. 99\)'),
    ([3, -1], None, 'labels outside the classes 0-9'),
    ([3, 2.5], None, 'labels outside the classes 0-9'),
    ([3, 4], 300.0, r'pixels range over \[0, 300\]'),
    ([3, 4], -0.5, r'pixels range over \[-0.5, 0\]'),
    ([3, 4], 254.5, r'pixels range over \[0, 254.5\]'),  # not bytes
])
def test_bad_contents_are_named_before_training(tmp_path, labels, images,
                                                message):
  x = np.zeros((2, 28, 28), np.uint8 if images is None else np.float32)
  if images is not None:
    x[1] = images
  _write_npz(tmp_path, x, np.array(labels))
  with pytest.raises(ValueError, match=message):
    data_files.read_mnist(str(tmp_path))


def test_images_already_in_unit_range_are_not_divided_again(tmp_path):
  rng = np.random.default_rng(1)
  x = rng.integers(0, 256, (40, 28, 28)).astype(np.uint8)
  y = np.arange(40) % 10
  _write_npz(tmp_path, x, y)
  from_bytes = mnist.load_iid(str(tmp_path), num_clients=2)
  scaled = tmp_path / 'scaled'
  scaled.mkdir()
  _write_npz(scaled, (x / 255.0).astype(np.float32), y)
  from_floats = mnist.load_iid(str(scaled), num_clients=2)
  for c in from_bytes.client_ids:
    np.testing.assert_allclose(from_floats.client_train[c][0],
                               from_bytes.client_train[c][0], atol=1e-7)
  assert from_floats.server_test[0].max() == from_bytes.server_test[0].max()
  assert 0.9 < from_bytes.server_test[0].max() <= 1.0

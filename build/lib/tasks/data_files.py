"""Readers of the dataset file formats the tasks share.

Real datasets cannot be downloaded here, so every loader reads standard files
from a user-given directory: MNIST (`mnist.npz` or the four IDX `.gz` files),
LEAF JSON shards (`users`, `num_samples`, `user_data[u] = {x, y}`, plain or
gzipped) and MOCHA `.mat` files (cell arrays `X`, `Y`, one cell per silo). A
missing or malformed file is a ValueError that names the file and what belongs
there, so the CLI can print it as one line. So are bad contents a format
cannot rule out (a label outside the classes, pixels outside 0-255 or
[0, 1], a value that is not finite): read as they are, they would be dropped
silently, crash a round, or train on wrongly scaled data.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import struct
import zipfile

import numpy as np
import scipy.io

from tff_hdp.federated_task import Arrays

MNIST_IDX_FILES = ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz',
                   't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')
_MNIST_NPZ_KEYS = ('x_train', 'y_train', 'x_test', 'y_test')
MNIST_CLASSES = 10


def require_dir(data_dir: str | None, what: str) -> str:
  """`data_dir` itself, or a ValueError saying that it must hold `what`."""
  if not data_dir:
    raise ValueError(f'no data directory given: pass --data_dir=DIR where DIR '
                     f'holds {what}.')
  if not os.path.isdir(data_dir):
    problem = ('is a file, not a folder' if os.path.exists(data_dir) else
               'does not exist')
    raise ValueError(f'data directory {data_dir} {problem}; it must be a '
                     f'folder holding {what}.')
  return data_dir


def read_mnist(data_dir: str | None,
               dataset: str = 'MNIST') -> tuple[np.ndarray, ...]:
  """MNIST as uint8 `(x_train, y_train, x_test, y_test)`, images 28x28.

  Reads `mnist.npz` (keys x_train, y_train, x_test, y_test) if present, else
  the four standard IDX `.gz` files. Fashion-MNIST ships in the same layout
  and names; `dataset` names the data set in errors.
  """
  what = ('mnist.npz (keys x_train, y_train, x_test, y_test) or the four '
          f'{dataset} IDX files ' + ', '.join(MNIST_IDX_FILES))
  data_dir = require_dir(data_dir, what)
  npz = os.path.join(data_dir, 'mnist.npz')
  if os.path.exists(npz):
    try:
      with np.load(npz) as f:
        found = {k: f[k] for k in f.files}
    except (OSError, ValueError, AttributeError, zipfile.BadZipFile) as e:
      raise ValueError(f'cannot read {npz} as an .npz archive: {e}') from None
    missing = [k for k in _MNIST_NPZ_KEYS if k not in found]
    if missing:
      raise ValueError(f'{npz} lacks keys {missing}; it must hold '
                       f'{list(_MNIST_NPZ_KEYS)}.')
    arrays = tuple(found[k] for k in _MNIST_NPZ_KEYS)
  else:
    paths = [os.path.join(data_dir, name) for name in MNIST_IDX_FILES]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
      raise ValueError(f'{data_dir} holds neither mnist.npz nor {missing[0]}; '
                       f'put {what} there.')
    arrays = tuple(_read_idx(p) for p in paths)
  x_train, y_train, x_test, y_test = arrays
  for x, y, split in ((x_train, y_train, 'train'), (x_test, y_test, 'test')):
    where = f'{dataset} {split} data in {data_dir}'
    if x.ndim != 3 or x.shape[1:] != (28, 28) or len(x) != len(y):
      raise ValueError(f'{where} has images of shape {x.shape} and {len(y)} '
                       'labels; expected N x 28 x 28 and N labels.')
    _check_pixels(x, where)
    check_labels(y, MNIST_CLASSES, where)
  return arrays


def _check_pixels(x: np.ndarray, where: str) -> None:
  """Pixels are bytes (0-255, as the IDX files and Keras' mnist.npz hold
  them) or floats already scaled to [0, 1]."""
  if not x.size:
    return
  if not (np.issubdtype(x.dtype, np.integer) or
          np.issubdtype(x.dtype, np.floating)):
    raise ValueError(f'{where}: pixels of type {x.dtype}; expected bytes '
                     '0-255 or floats in [0, 1].')
  low, high = x.min(), x.max()
  whole = np.issubdtype(x.dtype, np.integer) or bool(
      np.all(np.isfinite(x)) and np.all(x == np.round(x)))
  if not (0 <= low and (high <= 1 or (whole and high <= 255))):
    raise ValueError(f'{where}: pixels range over [{low:g}, {high:g}]; '
                     'expected bytes 0-255 or floats in [0, 1].')


def unit_pixels(x: np.ndarray) -> np.ndarray:
  """Images read by `read_mnist` as float32 in [0, 1]: bytes are divided by
  255, floats already in [0, 1] are kept (not divided again)."""
  if np.issubdtype(x.dtype, np.floating) and (not x.size or x.max() <= 1):
    return x.astype(np.float32)
  return (x / 255.0).astype(np.float32)


def check_labels(y: np.ndarray, num_classes: int, where: str) -> None:
  """Labels are whole numbers in [0, num_classes); `where` names the data.

  A label outside the classes would silently drop its examples (the
  single-digit split) or fail inside a TFF round (the loss).
  """
  y = np.asarray(y)
  if not y.size:
    return
  if not (np.issubdtype(y.dtype, np.integer) or
          np.issubdtype(y.dtype, np.floating)):
    raise ValueError(f'{where}: labels of type {y.dtype}; expected class '
                     f'indices 0-{num_classes - 1}.')
  bad = ~np.isin(y, np.arange(num_classes))
  if bad.any():
    raise ValueError(f'{where}: {int(bad.sum())} labels outside the classes '
                     f'0-{num_classes - 1} (e.g. {y[bad].flat[0]!r}).')


def _read_idx(path: str) -> np.ndarray:
  """One IDX file (big-endian header, unsigned bytes) as a numpy array."""
  try:
    with gzip.open(path, 'rb') as f:
      magic = f.read(4)
      if len(magic) != 4 or magic[:2] != b'\0\0' or magic[2] != 0x08:
        raise ValueError(f'{path} is not an IDX file of unsigned bytes.')
      ndim = magic[3]
      shape = struct.unpack(f'>{ndim}I', f.read(4 * ndim))
      data = np.frombuffer(f.read(), dtype=np.uint8)
  except (OSError, EOFError, struct.error) as e:
    raise ValueError(f'cannot read {path}: {e}') from None
  if data.size != int(np.prod(shape)):
    raise ValueError(f'{path} is truncated: header says {shape}, it holds '
                     f'{data.size} values.')
  return data.reshape(shape)


def read_leaf_json(path: str) -> dict[str, Arrays]:
  """One LEAF JSON file (`.json` or `.json.gz`): `{user: (x, y)}` in file order.

  x is float32 `[n, features]`, y the labels flattened to `[n]`.
  """
  opener = gzip.open if path.endswith('.gz') else open
  try:
    with opener(path, 'rt') as f:
      data = json.load(f)
  except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f'cannot read LEAF JSON file {path}: {e}') from None
  if (not isinstance(data, dict) or
      not {'users', 'user_data'} <= set(data)):
    raise ValueError(f'{path} is not LEAF JSON: it needs keys "users" and '
                     '"user_data" (user_data[u] = {"x": ..., "y": ...}).')
  clients = {}
  for user in data['users']:
    record = data['user_data'].get(user)
    if not isinstance(record, dict) or not {'x', 'y'} <= set(record):
      raise ValueError(f'{path}: user {user!r} has no user_data entry with '
                       '"x" and "y".')
    x = np.asarray(record['x'], dtype=np.float32)
    y = np.asarray(record['y']).reshape(-1)
    if len(x) != len(y):
      raise ValueError(f'{path}: user {user!r} has {len(x)} examples but '
                       f'{len(y)} labels.')
    clients[user] = (x.reshape(len(x), -1) if len(x) else x.reshape(0, 0), y)
  return clients


def read_leaf_dir(directory: str) -> dict[str, Arrays]:
  """All LEAF JSON shards (`*.json`, `*.json.gz`) in `directory`, merged."""
  paths = sorted(glob.glob(os.path.join(directory, '*.json')) +
                 glob.glob(os.path.join(directory, '*.json.gz')))
  if not paths:
    raise ValueError(f'{directory} holds no LEAF JSON shards (*.json or '
                     '*.json.gz).')
  clients = {}
  for path in paths:
    for user, arrays in read_leaf_json(path).items():
      if user in clients:
        raise ValueError(f'{path}: user {user!r} already appeared in an '
                         f'earlier shard of {directory}.')
      clients[user] = arrays
  return clients


def read_mat_silos(path: str) -> list[Arrays]:
  """A MOCHA-style `.mat` file: cell arrays X (n_k x d) and Y (n_k x 1).

  Returns one `(x, y)` per cell, x float32 `[n_k, d]`, y float32 `[n_k]`.
  """
  if not os.path.exists(path):
    raise ValueError(f'{path} does not exist; put the MATLAB file with cell '
                     'arrays X (one n_k x d matrix per silo) and Y (n_k x 1) '
                     'there.')
  try:
    mat = scipy.io.loadmat(path)
  except (OSError, ValueError, TypeError, IndexError,
          scipy.io.matlab.MatReadError) as e:
    raise ValueError(f'cannot read MATLAB file {path}: {e}') from None
  if 'X' not in mat or 'Y' not in mat:
    raise ValueError(f'{path} must hold cell arrays X and Y; it holds '
                     f'{sorted(k for k in mat if not k.startswith("__"))}.')
  xs, ys = np.ravel(mat['X']), np.ravel(mat['Y'])
  if len(xs) != len(ys):
    raise ValueError(f'{path}: X has {len(xs)} silos but Y has {len(ys)}.')
  silos = []
  for k, (x, y) in enumerate(zip(xs, ys)):
    x = np.asarray(x, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32).reshape(-1)
    if x.ndim != 2 or len(x) != len(y):
      raise ValueError(f'{path}: silo {k} has X of shape {x.shape} and '
                       f'{len(y)} labels; expected n_k x d and n_k labels.')
    silos.append((x, y))
  return silos

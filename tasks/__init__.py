"""Datasets and models, one module per task, behind `tff_hdp.federated_task.FederatedTask`.

`REGISTRY` maps a task name (the CLI's `--task`) to its record: the module
and function that load it, and where its real data set lives under the data
root (None: the task makes its own data). Adding a task is one module plus
one entry here. Loaders are imported when a task is loaded, so the command
line can read the names (for --help and validation) without TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sqlite3
import tempfile
from typing import Iterator, TYPE_CHECKING

if TYPE_CHECKING:
  from tff_hdp.federated_task import FederatedTask
  from tff_hdp.federated_task import TaskOptions


# Where real data sets live unless a run passes --data_dir: one setting for the
# command line's defaults and the tests, an environment variable so a clone
# anywhere can point at its data.
DATA_ROOT_ENV = 'TFF_HDP_DATA'
_DEFAULT_DATA_ROOT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '..',
    'shared', 'data')


def data_root() -> str:
  """`$TFF_HDP_DATA`, or `../shared/data` beside the repository."""
  return os.path.normpath(os.environ.get(DATA_ROOT_ENV) or _DEFAULT_DATA_ROOT)


# Where the tasks keep files they generate or index (the population's file,
# indexed copies of --client_data files), read by more than one task module.
CACHE_ENV = 'TFF_HDP_CACHE'


def cache_dir() -> str:
  """`$TFF_HDP_CACHE`, or `<tmp>/tff_hdp_cache`."""
  return os.environ.get(CACHE_ENV) or os.path.join(tempfile.gettempdir(),
                                                   'tff_hdp_cache')


@contextlib.contextmanager
def writing_cache(folder: str) -> Iterator[None]:
  """A block that writes under the cache `folder`: its failure (a folder
  that cannot be made or written, SQLite's full disk) is one ValueError
  naming the folder and $TFF_HDP_CACHE, where the user can point it."""
  try:
    yield
  except (OSError, sqlite3.OperationalError) as e:
    reason = (e.strerror if isinstance(e, OSError) and e.strerror else
              str(e))
    if os.path.exists(folder) and not os.path.isdir(folder):
      reason = 'it is a file, not a folder'
    name = (f'${CACHE_ENV}={folder}' if os.environ.get(CACHE_ENV) == folder
            else folder)
    raise ValueError(f'the task cache {name} cannot be written ({reason}); '
                     f'set ${CACHE_ENV} to a writable folder with free '
                     'space.') from None


@dataclasses.dataclass(frozen=True)
class Task:
  """A registered task: `module.loader(TaskOptions)` builds it; `data` is its
  folder under `data_root()`, or None when it needs no files."""

  module: str
  loader: str
  data: str | None = None
  # Its clients without --num_clients (None: every client of its data), for
  # --help; tests/tasks/test_task_defaults.py checks it against the loader.
  num_clients: int | None = None
  # False: its clients are its data's own (the silos of a cross-silo data
  # set), so --num_clients is refused rather than ignored.
  chooses_clients: bool = True

  def default_data_dir(self) -> str | None:
    return (os.path.join(data_root(), self.data)
            if self.data else None)


REGISTRY: dict[str, Task] = {
    'digits': Task('tff_hdp.tasks.digits', 'load_task', num_clients=100),
    'fashion_mnist_iid': Task('tff_hdp.tasks.mnist', 'load_fashion_iid_task',
                              'fashion_mnist', num_clients=20),
    'fashion_mnist_noniid': Task('tff_hdp.tasks.mnist', 'load_fashion_task',
                                 'fashion_mnist', num_clients=2000),
    'femnist': Task('tff_hdp.tasks.emnist', 'load_full_task', 'emnist'),
    'femnist_leaf': Task('tff_hdp.tasks.femnist_leaf', 'load_task', 'femnist_leaf'),
    'fmnist': Task('tff_hdp.tasks.emnist', 'load_digits_task', 'emnist'),
    'gleam': Task('tff_hdp.tasks.cross_silo', 'load_gleam_task', 'cross_silo/gleam',
                  chooses_clients=False),
    'linear_regression': Task('tff_hdp.tasks.linear_regression', 'load_task',
                              num_clients=100),
    'mnist_iid': Task('tff_hdp.tasks.mnist', 'load_iid_task', 'mnist', num_clients=20),
    'mnist_noniid': Task('tff_hdp.tasks.mnist', 'load_task', 'mnist',
                         num_clients=2000),
    'mnist_noniid_skewed': Task('tff_hdp.tasks.mnist', 'load_skewed_task', 'mnist',
                                num_clients=2000),
    'population': Task('tff_hdp.tasks.population', 'load_task', num_clients=1000),
    'rotated_masked_mnist': Task('tff_hdp.tasks.cross_silo',
                                 'load_rotated_masked_mnist_task', 'mnist',
                                 num_clients=40),
    'school': Task('tff_hdp.tasks.cross_silo', 'load_school_task', 'cross_silo/school',
                   chooses_clients=False),
    'vehicle': Task('tff_hdp.tasks.cross_silo', 'load_vehicle_task',
                    'cross_silo/vehicle_partial', chooses_clients=False),
}


def load(name: str, options: TaskOptions) -> FederatedTask:
  """Loads task `name`; an unknown name is a ValueError listing the known."""
  if name not in REGISTRY:
    raise ValueError(f'unknown task {name!r}; known tasks: {sorted(REGISTRY)}.')
  task = REGISTRY[name]
  return getattr(importlib.import_module(task.module), task.loader)(options)

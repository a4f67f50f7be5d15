"""Datasets and models, one module per task, behind `tff_hdp.federated_task.FederatedTask`.

`REGISTRY` maps a task name (the CLI's `--task`) to a loader taking
`TaskOptions`; adding a task is one module plus one entry here.
"""

from __future__ import annotations

from typing import Callable

from tasks import cross_silo
from tasks import digits
from tasks import emnist
from tasks import femnist_leaf
from tasks import linear_regression
from tasks import mnist
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions

REGISTRY: dict[str, Callable[[TaskOptions], FederatedTask]] = {
    'digits': digits.load_task,
    'femnist': emnist.load_full_task,
    'femnist_leaf': femnist_leaf.load_task,
    'fmnist': emnist.load_digits_task,
    'gleam': cross_silo.load_gleam_task,
    'linear_regression': linear_regression.load_task,
    'mnist_iid': mnist.load_iid_task,
    'mnist_noniid': mnist.load_task,
    'mnist_noniid_skewed': mnist.load_skewed_task,
    'rotated_masked_mnist': cross_silo.load_rotated_masked_mnist_task,
    'school': cross_silo.load_school_task,
    'vehicle': cross_silo.load_vehicle_task,
}


def load(name: str, options: TaskOptions) -> FederatedTask:
  """Loads task `name`; an unknown name is a ValueError listing the known."""
  if name not in REGISTRY:
    raise ValueError(f'unknown task {name!r}; known tasks: {sorted(REGISTRY)}.')
  return REGISTRY[name](options)

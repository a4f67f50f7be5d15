"""Datasets and models, one module per task, behind `tff_hdp.federated_task.FederatedTask`.

`REGISTRY` maps a task name (the CLI's `--task`) to a loader taking
`TaskOptions`; adding a task is one module plus one entry here.
"""

from __future__ import annotations

from typing import Callable

from tasks import digits
from tff_hdp.federated_task import FederatedTask
from tff_hdp.federated_task import TaskOptions

REGISTRY: dict[str, Callable[[TaskOptions], FederatedTask]] = {
    'digits': digits.load_task,
}


def load(name: str, options: TaskOptions) -> FederatedTask:
  """Loads task `name`; an unknown name is a ValueError listing the known."""
  if name not in REGISTRY:
    raise ValueError(f'unknown task {name!r}; known tasks: {sorted(REGISTRY)}.')
  return REGISTRY[name](options)

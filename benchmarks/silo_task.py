"""The flags and loading shared by the cross-silo benchmarks: which task
(from its data folder), which algorithm, what DP-SGD batch size."""

from __future__ import annotations

from absl import flags

from tff_hdp.cli import entry

TASK = flags.DEFINE_enum('task', 'school', ['school', 'vehicle', 'gleam'],
                         'Cross-silo task.')
DATA_DIR = flags.DEFINE_string(
    'data_dir', None, "The task's data folder (default: its folder under "
    '$TFF_HDP_DATA or ../shared/data).')
ALGORITHM = flags.DEFINE_string('algorithm', 'mrmtl', 'Cross-silo algorithm.')
BATCH_SIZE = flags.DEFINE_integer('batch_size', 32, 'DP-SGD batch size.')


def load():
  """(task, algorithm record) the flags name; a bad one is an InputError."""
  from tff_hdp import tasks  # pylint: disable=g-import-not-at-top
  from tff_hdp.federated_task import TaskOptions  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  data_dir = DATA_DIR.value or tasks.REGISTRY[TASK.value].default_data_dir()
  try:
    return (tasks.load(TASK.value, TaskOptions(data_dir=data_dir,
                                               batch_size=BATCH_SIZE.value)),
            cse.algorithm_record(ALGORITHM.value))
  except ValueError as e:
    raise entry.InputError(f'--task={TASK.value}: {e}') from None

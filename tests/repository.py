"""Where the tests find the repository and the real data sets.

A test that needs a real data set asks `data_path` for it. When the file is
absent the test is skipped with a reason that names the file and the setting
(`$TFF_HDP_DATA`, default `../shared/data`); under `CI`, tests/conftest.py
turns any such skip into a failed run, so CI never passes without running them.
"""

import csv
import os

import pytest

import tasks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISSING_DATA = 'missing data set'


def task_data(name: str) -> str:
  """The folder registered task `name` reads (`tasks.REGISTRY`), or skips
  the calling test naming what is missing."""
  return data_path(tasks.REGISTRY[name].data)


def data_path(*parts: str) -> str:
  """`data_root()/parts...`, or skips the calling test naming what is
  missing."""
  path = os.path.join(tasks.data_root(), *parts)
  if not os.path.exists(path):
    pytest.skip(f'{MISSING_DATA}: {path} (set ${tasks.DATA_ROOT_ENV} to '
                'the folder holding the data sets)')
  return path


def rounds_rows(output_dir: str, configuration: str) -> list[dict]:
  """The rows of a run's `<configuration>/rounds.csv` so far ([] before)."""
  path = os.path.join(output_dir, configuration, 'rounds.csv')
  if not os.path.exists(path):
    return []
  with open(path, newline='') as f:
    return list(csv.DictReader(f))

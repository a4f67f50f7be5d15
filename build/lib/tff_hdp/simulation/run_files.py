"""The files a run leaves: `rounds.csv`, `summary.json`, `final_model.npz`,
TensorBoard events.

`rounds.csv` is appended one flushed row per round, so the file a person reads
is complete up to the last finished round; a resumed run first drops the rows
(and TensorBoard events, `TensorBoardRounds`) written after its checkpoint,
so every round appears exactly once. Every write here that fails raises an
`OSError` naming its file (`checkpointing.writing`), e.g. on a full disk.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import time
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.simulation import checkpointing


def csv_rounds(path: str) -> int:
  """The last round whose row a per-round CSV holds (0: none, or no file)."""
  if not os.path.exists(path):
    return 0
  with open(path, newline='') as f:
    rounds = [r.get('round') for r in csv.DictReader(f)]
  return max((int(r) for r in rounds if r and r.isdigit()), default=0)


def open_csv(path: str, columns: Sequence[str], keep_through: int):
  """Opens the per-round CSV, keeping only rows of rounds <= keep_through."""
  columns = list(columns)
  kept = []
  if keep_through and os.path.exists(path):
    with open(path, newline='') as f:
      reader = csv.DictReader(f)
      if reader.fieldnames != columns:
        raise checkpointing.CheckpointError(
            f'{path} has other columns than this run writes; use another '
            '--output_dir or delete it.')
      # A row cut short by a kill has missing fields (None); it is redone.
      kept = [r for r in reader
              if None not in r.values() and int(r['round']) <= keep_through]
    if [int(r['round']) for r in kept] != list(range(1, keep_through + 1)):
      raise checkpointing.CheckpointError(
          f'{path} lacks rows of rounds before the checkpoint (round '
          f'{keep_through}); delete the output folder to start over.')
  # Rewritten beside it and renamed: truncated in place, it lost the rows
  # before the checkpoint to a kill or a full disk mid-write, and every later
  # resume stopped on it.
  with checkpointing.writing(path):
    with open(f'{path}.tmp', 'w', newline='') as f:
      writer = csv.DictWriter(f, fieldnames=columns)
      writer.writeheader()
      writer.writerows(kept)
    os.replace(f'{path}.tmp', path)
    csv_file = open(path, 'a', newline='')
  return csv_file, csv.DictWriter(csv_file, fieldnames=columns)


def csv_cell(value):
  """A value as rounds.csv writes it: blank for None, floats to 6 digits."""
  if value is None:
    return ''
  if isinstance(value, float):
    return f'{value:.6g}'
  return value


def releasable(row: dict, columns: Sequence[str]) -> dict[str, float]:
  """A row's finite numbers in `columns`, for release managers; blanks and
  opt-out groups' inf epsilon stay out."""
  return {k: float(row[k]) for k in columns
          if k != 'round' and row.get(k) is not None and
          math.isfinite(row[k])}


class TensorBoardRounds(tff.program.ReleaseManager):
  """TFF's `TensorBoardReleaseManager` for a run that may resume.

  A run killed after its last checkpoint has released rounds that its
  resumption releases again (the same values: same secret seed). TensorBoard
  would show both copies, so `keep_through(k)`, called by the round loop
  before the first release, drops the events of rounds after k from the
  folder, as `open_csv` drops rows.
  """

  def __init__(self, directory: str):
    self._directory = directory
    self._inner = None

  def keep_through(self, round_num: int) -> None:
    """Drops the events of rounds after `round_num` already in the folder."""
    paths = sorted(glob.glob(os.path.join(self._directory, '*tfevents*')))
    kept = []
    for path in paths:
      try:
        for record in tf.data.TFRecordDataset(path):
          event = tf.compat.v1.Event.FromString(record.numpy())
          if event.step <= round_num and event.HasField('summary'):
            kept.append(record.numpy())
      except tf.errors.DataLossError:
        pass  # its last record cut short (a full disk, a kill): the rest kept
    if kept:
      name = os.path.join(
          self._directory,
          f'events.out.tfevents.{time.time():.0f}.kept_through_{round_num}')
      # Written under a name the glob above skips: one cut short is not read.
      partial = os.path.join(self._directory, f'kept_through_{round_num}.tmp')
      with checkpointing.writing(name):
        with tf.io.TFRecordWriter(partial) as f:
          for record in kept:
            f.write(record)
        os.replace(partial, name)
    for path in paths:
      os.remove(path)

  async def release(self, value, key: int) -> None:
    with checkpointing.writing(self._directory):
      if self._inner is None:
        self._inner = tff.program.TensorBoardReleaseManager(self._directory)
      await self._inner.release(value, key=key)


def save_model(path: str, weights: tff.learning.models.ModelWeights) -> None:
  """The final global model as .npz (trainable_0.., non_trainable_0..)."""
  arrays = {f'trainable_{i}': np.asarray(w)
            for i, w in enumerate(weights.trainable)}
  arrays.update({f'non_trainable_{i}': np.asarray(w)
                 for i, w in enumerate(weights.non_trainable)})
  with checkpointing.writing(path):
    np.savez(path, **arrays)


def write_summary(path: str, summary: dict) -> None:
  """JSON summary; infinite epsilons (opt-out groups) are written as null."""

  def clean(v):
    if isinstance(v, float) and not math.isfinite(v):
      return None
    if isinstance(v, dict):
      return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
      return [clean(x) for x in v]
    return v

  with checkpointing.writing(path), open(path, 'w') as f:
    json.dump(clean(summary), f, indent=2)

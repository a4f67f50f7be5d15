"""The one round loop: every setting (trusted FedHDP, untrusted server,
cross-silo) plugs a `RoundProgram` into `run_rounds`.

In the spirit of `tff.simulation.run_training_process`, the loop owns what the
settings share: resuming from a checkpoint, the budget guard, the evaluation
and checkpoint cadence, `rounds.csv` (`tff_hdp.simulation.run_files`), the
release managers (`tff.program.ReleaseManager`, e.g. TensorBoard) and the
progress bar. A program owns only what differs: how it trains a round, what it
evaluates, and what its checkpoint holds. Before each round the program's
ledger (if it has one) is asked whether the round would push any private group
past its target; such a round is refused. `rounds.csv` and the release
managers get only the program's `columns`: those the printed epsilon covers
(`tff_hdp.privacy.release_policy`).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import os
import time
from typing import Callable, Sequence

import tensorflow_federated as tff
import tqdm

from tff_hdp.privacy import accounting
from tff_hdp.privacy import release_policy
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import run_files


class BudgetExhaustedError(RuntimeError):
  """A round would spend more privacy than a group's target allows."""


class RoundProgram(abc.ABC):
  """What a setting plugs into `run_rounds`; subclasses fill in `train`,
  `evaluate` and `weights`, and the rest where they differ."""

  label: str = 'rounds'  # the progress bar's name
  rounds: int
  columns: Sequence[str]  # rounds.csv's columns, in order
  ledger: accounting.PrivacyLedger | None = None  # None: no budget guard
  # Whether a round redone after a resume releases exactly what it released
  # before (noise from the run's secret seed). If not, a run that released
  # rounds past its checkpoint is not resumed: it would release them again,
  # with new noise the ledger does not count.
  repeats_rounds: bool = True

  def restore(self, checkpoint: checkpointing.RunCheckpoint) -> int:
    """Loads the newest checkpoint, if any; returns the rounds it holds."""
    del checkpoint
    return 0

  def save(self, checkpoint: checkpointing.RunCheckpoint,
           round_num: int) -> None:
    del checkpoint, round_num

  @abc.abstractmethod
  def train(self, round_num: int) -> dict:
    """Runs round `round_num`; returns its row (column -> value or None)."""

  @abc.abstractmethod
  def evaluate(self, round_num: int) -> dict:
    """The metrics after round `round_num`, added to its row."""

  def postfix(self, metrics: dict) -> dict[str, str]:
    """What the progress bar shows of `metrics`."""
    return {'acc_g': f"{metrics['acc_g']:.2f}"}

  @abc.abstractmethod
  def weights(self) -> tff.learning.models.ModelWeights:
    """The current global model."""

  def close(self) -> None:
    """Frees what the program holds beyond its rounds (e.g. files), when the
    loop ends or fails."""


def require_measurements(
    algorithm: str, process: tff.templates.IterativeProcess,
    measurements: Sequence[release_policy.Measurement]) -> None:
  """Refuses, before any round, a record declaring `measurements` (those the
  run reads) that its factory does not report: their names are in the
  process's type (`metrics['aggregator']`), and otherwise the run would
  fail at the first round's row, after the round trained.

  Raises:
    ValueError: naming the algorithm and the missing measurements.
  """
  reported = process.next.type_signature.result[1].member['aggregator']
  names = (tff.structure.name_list(reported)
           if isinstance(reported, tff.StructType) else [])
  missing = [m.name for m in measurements if m.name not in names]
  if missing:
    raise ValueError(
        f'algorithm {algorithm!r}: its record declares measurement(s) '
        f'{", ".join(map(repr, missing))} that its factory does not report '
        f'(it reports: {", ".join(names) or "none"}); correct the record\'s '
        'measurements or the factory.')


@dataclasses.dataclass
class LoopResult:
  rows: list[dict]  # everything measured, released or not
  final_metrics: dict
  seconds: float  # of every process that ran these rounds (resumes too)


def run_rounds(program: RoundProgram,
               *,
               output_dir: str | None = None,
               eval_every: int = 10,
               progress: bool = True,
               checkpoint: checkpointing.RunCheckpoint | None = None,
               checkpoint_every: int = 10,
               release_managers: Sequence[tff.program.ReleaseManager] = (),
               on_round: Callable[[int, tff.learning.models.ModelWeights],
                                  None] | None = None) -> LoopResult:
  """Runs `program` for its rounds, evaluating every `eval_every` and last.

  Args:
    program: the setting's rounds.
    output_dir: where `rounds.csv` goes (None: no files).
    eval_every: evaluate after every this many rounds and after the last.
    progress: show a progress bar.
    checkpoint: resume from it and save to it every `checkpoint_every` rounds
      and after the last; if the program does not repeat rounds, every
      round before it is released, with its row, which a resume releases if
      the last process did not (a round released past its last save would
      end the run for good); None: no checkpoints.
    checkpoint_every: see `checkpoint`; 0 saves no round (the checkpoint
      still keeps the run's key and secret).
    release_managers: each gets every round's released numbers, keyed by the
      round (a `run_files.TensorBoardRounds` first drops what it holds of
      rounds after the checkpoint).
    on_round: sees every released global model (round, weights), e.g. for
      audits.

  Returns:
    The rows measured, the last metrics and the seconds taken, counting
    those of earlier processes when resumed.

  Raises:
    BudgetExhaustedError: a round would exceed a group's target epsilon.
    checkpointing.CheckpointError: a checkpoint or CSV of another run.
  """
  done = program.restore(checkpoint) if checkpoint is not None else 0
  released = run_files.csv_rounds(os.path.join(output_dir, 'rounds.csv')
                                  ) if output_dir else 0
  # A program that cannot redo a round saves each round, and keeps its row,
  # before releasing it: a kill then never leaves a released round unsaved.
  saves_first = (checkpoint is not None and checkpoint_every > 0 and
                 not program.repeats_rounds)
  pending = (checkpoint.pending_row(done) if saves_first and output_dir and
             done and released == done - 1 else None)
  if not program.repeats_rounds and released > done:
    raise checkpointing.CheckpointError(
        f'{output_dir} released rounds {done + 1}-{released} past its last '
        f'checkpoint (round {done}) with noise this run cannot repeat (its '
        'aggregator does not draw it from the run\'s secret seed): resuming '
        'would release them again, unaccounted. Delete the folder to start '
        'over.')
  if done:
    tqdm.tqdm.write(f'{program.label}: resuming from round {done} '
                    f'({checkpoint.directory})')
  kept = done - 1 if pending else done
  for manager in release_managers:
    if isinstance(manager, run_files.TensorBoardRounds):
      manager.keep_through(kept)
  csv_file = writer = None
  if output_dir:
    os.makedirs(output_dir, exist_ok=True)
    csv_path = os.path.join(output_dir, 'rounds.csv')
    csv_file, writer = run_files.open_csv(csv_path, program.columns, kept)

  def release(round_num, cells, numbers):
    if writer:
      with checkpointing.writing(csv_path):
        writer.writerow(cells)
        csv_file.flush()
    for manager in release_managers:
      asyncio.run(manager.release(numbers, key=round_num))
    if on_round is not None:
      on_round(round_num, program.weights())

  rows = []
  metrics = None
  earlier = checkpoint.seconds_through(done) if checkpoint and done else 0.0
  start = time.time()

  def save(round_num):
    program.save(checkpoint, round_num)
    checkpoint.record_seconds(round_num, earlier + time.time() - start)

  bar = tqdm.tqdm(range(done + 1, program.rounds + 1), initial=done,
                  total=program.rounds, desc=program.label, unit='round',
                  disable=not progress, dynamic_ncols=True)
  try:
    if pending:  # saved, not yet released when the last process stopped
      release(done, *pending)
    for round_num in bar:
      if program.ledger is not None:
        exceeded = program.ledger.first_exceeded(round_num)
        if exceeded is not None:
          budget, eps = exceeded
          raise BudgetExhaustedError(
              f'round {round_num} refused: privacy group {budget.name!r} '
              f'would spend epsilon={eps:.4g}, above its target '
              f'{budget.target_epsilon:.4g}.')
      row = program.train(round_num)
      row['round'] = round_num
      if round_num % eval_every == 0 or round_num == program.rounds:
        metrics = program.evaluate(round_num)
        row.update(metrics)
        bar.set_postfix(program.postfix(metrics))
      rows.append(row)
      cells = {k: run_files.csv_cell(row.get(k)) for k in program.columns}
      numbers = run_files.releasable(row, program.columns)
      if saves_first:
        checkpoint.record_pending_row(
            round_num, {k: str(v) for k, v in cells.items()}, numbers)
        save(round_num)
      release(round_num, cells, numbers)
      if (checkpoint is not None and checkpoint_every > 0 and
          not saves_first and (round_num % checkpoint_every == 0 or
                               round_num == program.rounds)):
        save(round_num)
  finally:
    if csv_file:
      with checkpointing.writing(csv_path):
        csv_file.close()
  if metrics is None:  # Resumed after the last round: nothing was evaluated.
    metrics = program.evaluate(program.rounds)
  return LoopResult(rows, metrics, earlier + time.time() - start)

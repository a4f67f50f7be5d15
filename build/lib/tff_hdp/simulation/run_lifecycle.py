"""One run's lifecycle, the same in the three settings.

The run's folder is held for this process (`folder_lock`); its run key is
written before anything is released (`RunCheckpoint.claim`), so a re-run
into the folder is the same run, resuming and repeating its rounds exactly,
or is refused; the DP secret is drawn once and kept beside the key; the
setting's `RoundProgram` is trained by the one round loop; the summary is
written last, so a folder with a summary holds a finished run. A setting
supplies only what differs: its settings (a `RunSettings` with its own
fields), its run key, its program (built once the folder is claimed) and
its summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Callable, Mapping, Sequence

import tensorflow_federated as tff

from tff_hdp.privacy import dp_randomness
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import folder_lock
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import run_files

SUMMARY_FILE = 'summary.json'
FINAL_MODEL_FILE = 'final_model.npz'


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
  """What a run of every setting is given (each setting's settings extend
  it with their own fields)."""

  rounds: int
  seed: int = 0
  eval_every: int = 10
  checkpoint_every: int = 10  # 0: no saved rounds (the run key still is)
  # > 0: an audit run with this many canaries per privacy group, client or
  # silo (tff_hdp.simulation.canary_audit).
  canaries: int = 0
  # Voids the guarantee: see tff_hdp.privacy.dp_randomness.
  unsafe_seeded_dp_randomness: bool = False
  # Accept a delta above the setting's bound (1 / N_j, 1 / n_i, n_k^-1.1).
  allow_large_delta: bool = False


@dataclasses.dataclass(frozen=True)
class ClaimedRun:
  """A run whose folder (if any) holds its key: where its secrets come
  from."""

  settings: RunSettings
  checkpoint: checkpointing.RunCheckpoint | None

  def secret(self) -> int:
    """The seed of the run's DP noise and sampling (`dp_randomness`)."""
    return dp_randomness.run_seed(self.settings.seed,
                                  self.settings.unsafe_seeded_dp_randomness,
                                  self.checkpoint)

  def client_seeds(self, num_clients: int) -> list[int]:
    """Each DP-SGD client's (silo's) own seed, from the run's secret."""
    return dp_randomness.client_seeds(
        self.settings.seed, self.settings.unsafe_seeded_dp_randomness,
        num_clients, self.checkpoint)


def run(run_dir: str | None, key: Mapping, settings: RunSettings,
        build: Callable[[ClaimedRun], round_loop.RoundProgram],
        summarize: Callable[[round_loop.RoundProgram, round_loop.LoopResult],
                            dict],
        *,
        progress: bool = True,
        save_final_model: bool = False,
        release_managers: Sequence[tff.program.ReleaseManager] = (),
        on_round=None) -> tuple[dict, round_loop.RoundProgram]:
  """Trains one run; returns (and, with a `run_dir`, writes) its summary
  (`summarize`'s, then the seconds it took), and its program as the last
  round left it.

  Args:
    run_dir: the run's folder (None: nothing is written or resumed).
    key: what makes two runs the same run (the setting's `run_key`).
    settings: the run's; its cadences and seed are read here.
    build: the setting's program, from the claimed run (its secrets).
    summarize: the setting's summary, from the program and the loop's
      result.
    progress: show progress bars.
    save_final_model: also write the final global model (`final_model.npz`).
    release_managers, on_round: `round_loop.run_rounds`'.
  """
  with (folder_lock.exclusive(run_dir) if run_dir else
        contextlib.nullcontext()):
    checkpoint = None
    if run_dir:
      checkpoint = checkpointing.RunCheckpoint(
          os.path.join(run_dir, 'checkpoints'), key)
      checkpoint.claim()
    program = build(ClaimedRun(settings, checkpoint))
    try:
      result = round_loop.run_rounds(
          program, output_dir=run_dir, eval_every=settings.eval_every,
          progress=progress, checkpoint=checkpoint,
          checkpoint_every=settings.checkpoint_every,
          release_managers=release_managers, on_round=on_round)
    finally:
      program.close()
    if run_dir and save_final_model:
      run_files.save_model(os.path.join(run_dir, FINAL_MODEL_FILE),
                           program.weights())
    # The seconds of every process that trained it (resumes too).
    summary = dict(summarize(program, result), seconds=result.seconds)
    if run_dir:
      run_files.write_summary(os.path.join(run_dir, SUMMARY_FILE), summary)
  return summary, program


def completed_summary(run_dir: str, key: Mapping,
                      **expected) -> dict | None:
  """The summary of a finished run of exactly this key in `run_dir`, or
  None.

  Lets a sweep skip what an earlier invocation finished: a summary counts
  only with its metrics, the `expected` values, and this run's key beside it
  (a summary kept without checkpoints, or of other settings, counts as
  unfinished); another run's key is a CheckpointError, as resuming it would
  be.
  """
  summary = checkpointing.read_json_dict(os.path.join(run_dir, SUMMARY_FILE))
  if ((summary.get('metrics') or {}).get('acc_g') is None or
      any(summary.get(k) != v for k, v in expected.items())):
    return None
  same_run = checkpointing.RunCheckpoint(
      os.path.join(run_dir, 'checkpoints'), key).check_key()
  return summary if same_run else None

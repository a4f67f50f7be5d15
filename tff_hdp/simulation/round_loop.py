"""Runs a learning process round by round: sampling, budget, metrics, files.

Client sampling is drawn from `(sampling seed, round)` alone, so a round can
be re-drawn without replaying the ones before it; the sampling seed is the
run's secret (`tff_hdp.privacy.dp_randomness`), because the accountant's amplification
by subsampling assumes nobody knows who took part. Before each round the
ledger is asked whether it would push any private group past its target; such
a round is refused. Every round appends one CSV row (flushed), so the file a
person reads is complete up to the last finished round; its columns, and what
the release managers get, are those the printed epsilon covers
(`tff_hdp.privacy.release_policy`). With a checkpoint, a re-run resumes after the last
saved round and first drops the CSV rows written after it, so every round
appears exactly once.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import math
import os
import time
from typing import Callable, Hashable, Sequence

import numpy as np
import tensorflow_federated as tff
import tqdm

from tff_hdp.federated_task import FederatedTask
from tff_hdp.privacy import accounting
from tff_hdp.simulation import checkpointing
from tff_hdp.learning import client_work
from tff_hdp.learning import cohort
from tff_hdp.learning import ditto
from tff_hdp.simulation import evaluation
from tff_hdp.privacy import release_policy
from tff_hdp.learning.fedhdp import PrivacyPlan
from tff_hdp.privacy.privacy_groups import GroupAssignment


class BudgetExhaustedError(RuntimeError):
  """A round would spend more privacy than a group's target allows."""


def sample_clients(client_ids: Sequence[Hashable],
                   sampling: accounting.Sampling, seed: int,
                   round_num: int) -> list[Hashable]:
  """The clients of round `round_num`, as the accountant assumes them drawn."""
  rng = np.random.default_rng([seed, round_num, 0x5A])
  n = len(client_ids)
  if isinstance(sampling, accounting.PoissonSampling):
    chosen = np.flatnonzero(rng.random(n) < sampling.q)
  else:
    chosen = np.sort(rng.choice(n, sampling.clients_per_round, replace=False))
  return [client_ids[i] for i in chosen]


def _client_seed(seed: int, round_num: int, position: int) -> int:
  return int(np.random.default_rng([seed, round_num, position]).integers(2**31))


@dataclasses.dataclass
class Personalization:
  """A Ditto step and the store it updates: `ditto.build_personalization`,
  or `ditto.build_cohort_personalization` where `run` packs cohorts."""

  step: tff.Computation
  models: ditto.PersonalModels = dataclasses.field(
      default_factory=ditto.PersonalModels)


@dataclasses.dataclass
class RunResult:
  state: object
  rows: list[dict]
  final_metrics: dict
  epsilons: dict[str, float]
  seconds: float


def _columns(groups) -> list[str]:
  cols = ['round', 'num_clients', 'clip_norm', 'fraction_clipped_estimate',
          'train_loss', 'train_accuracy', 'num_non_finite_updates']
  for g in groups:
    cols += [f'count_{g.name}', f'weight_{g.name}', f'noise_std_{g.name}',
             f'epsilon_{g.name}']
  cols += ['acc_g', 'acc_g_p', 'var_g_p', 'acc_g_np', 'var_g_np', 'delta_g',
           'acc_l_p', 'var_l_p', 'acc_l_np', 'var_l_np', 'delta_l']
  return cols


def open_csv(path: str, columns: list[str], keep_through: int):
  """Opens the per-round CSV, keeping only rows of rounds <= keep_through."""
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
  csv_file = open(path, 'w', newline='')
  writer = csv.DictWriter(csv_file, fieldnames=columns)
  writer.writeheader()
  writer.writerows(kept)
  csv_file.flush()
  return csv_file, writer


def save_model(path: str, weights: tff.learning.models.ModelWeights) -> None:
  """The final global model as .npz (trainable_0.., non_trainable_0..)."""
  arrays = {f'trainable_{i}': np.asarray(w)
            for i, w in enumerate(weights.trainable)}
  arrays.update({f'non_trainable_{i}': np.asarray(w)
                 for i, w in enumerate(weights.non_trainable)})
  np.savez(path, **arrays)


def _restore_personal(checkpoint, round_num, client_ids):
  path = checkpoint.personal_path(round_num)
  if not os.path.exists(path):
    raise checkpointing.CheckpointError(
        f'checkpoint of round {round_num} has no personal models ({path}); '
        'delete the output folder to start over.')
  try:
    return ditto.PersonalModels.load(path, client_ids)
  except (OSError, ValueError, KeyError) as e:
    raise checkpointing.CheckpointError(
        f'cannot read personal models {path}: {e}') from None


def _personalize(personalization, global_weights, sampled, data,
                 cohort_size):
  """The sampled clients' Ditto steps on the round's data (`data` is
  cohorts when cohort_size > 1: personal models go stacked alike)."""
  personal = [personalization.models.get(c, global_weights.trainable)
              for c in sampled]
  if cohort_size > 1:
    sizes = cohort.split_sizes(len(sampled), cohort_size)
    personal = ditto.unstack_personal(personalization.step(
        global_weights, ditto.stack_personal(personal, sizes), data))
  else:
    personal = personalization.step(global_weights, personal, data)
  personalization.models.update(sampled, personal)


def _evaluate(task, weights, private_flags, personalization):
  metrics = evaluation.global_model_metrics(task, weights, private_flags)
  if personalization is not None:
    metrics.update(evaluation.personalized_metrics(
        task, weights, personalization.models, private_flags))
  return metrics


def _fmt(value):
  if value is None:
    return ''
  if isinstance(value, float):
    return f'{value:.6g}'
  return value


def _releasable(row: dict, columns: Sequence[str]) -> dict[str, float]:
  """A row's finite numbers in `columns`; blanks and opt-out groups' inf
  epsilon stay out."""
  return {k: float(row[k]) for k in columns
          if k != 'round' and row[k] is not None and math.isfinite(row[k])}


def run(task: FederatedTask,
        process: tff.learning.templates.LearningProcess,
        plan: PrivacyPlan,
        client_choices: GroupAssignment,
        *,
        seed: int,
        sampling_seed: int,
        output_dir: str | None = None,
        eval_every: int = 10,
        progress: bool = True,
        checkpoint: checkpointing.RunCheckpoint | None = None,
        checkpoint_every: int = 10,
        on_round: Callable[[int, tff.learning.models.ModelWeights], None]
        | None = None,
        personalization: Personalization | None = None,
        release_managers: Sequence[tff.program.ReleaseManager] = (),
        cohort_size: int = 0,
        release_unprotected: bool = False) -> RunResult:
  """Trains for `plan.rounds` rounds and evaluates every `eval_every`.

  `plan.assignment` holds the groups the algorithm trains with;
  `client_choices` holds the clients' own choices, used for the private /
  non-private metrics so that all algorithms are scored alike. `seed` orders
  each client's data; `sampling_seed` (secret, see `tff_hdp.privacy.dp_randomness`)
  draws the clients of each round. With
  `checkpoint`, state is saved every `checkpoint_every` rounds and after the
  last, and a run that finds a checkpoint continues from it. `on_round`
  sees every released global model (round number, weights), e.g. for audits.
  With `personalization`, each sampled client also takes its Ditto steps
  from the round's global model, and the personalized metrics are reported;
  with `cohort_size` > 1 its step must be a cohort step.
  Each `release_managers` entry (e.g. `tff.program.TensorBoardReleaseManager`)
  gets every round's row (its finite numbers), keyed by the round.
  With `cohort_size` > 1, `process` is a cohort process
  (`cohort.build_cohort_fedhdp`) and each round's clients reach it packed in
  cohorts of at most `cohort_size` (the same clients, data order and groups).
  `rounds.csv` and the release managers get only the statistics the printed
  epsilon covers (`release_policy.withheld_columns`), all of them with
  `release_unprotected`; in a run whose plan is not `accounted` the epsilon
  columns stay blank. `RunResult.rows` holds everything measured.
  """
  groups = plan.assignment.groups
  client_ids = task.client_ids
  private_flags = {
      c: client_choices.groups[client_choices.group_of(c)].is_private
      for c in client_ids
  }
  withheld = (() if release_unprotected else release_policy.withheld_columns(
      groups, plan.adaptive_clipping))
  columns = [c for c in _columns(groups) if c not in withheld]
  state = process.initialize()
  done = 0
  if checkpoint is not None:
    restored, done = checkpoint.restore(state)
    if restored is not None:
      state = restored
      if personalization is not None:
        personalization.models = _restore_personal(checkpoint, done,
                                                   client_ids)
  writer = csv_file = None
  if output_dir:
    os.makedirs(output_dir, exist_ok=True)
    csv_file, writer = open_csv(os.path.join(output_dir, 'rounds.csv'),
                                 columns, done)
  rows = []
  metrics = {}
  start = time.time()
  bar = tqdm.tqdm(range(done + 1, plan.rounds + 1), initial=done,
                  total=plan.rounds, desc=f'{task.name} rounds', unit='round',
                  disable=not progress, dynamic_ncols=True)
  try:
    for round_num in bar:
      exceeded = plan.ledger.first_exceeded(round_num)
      if exceeded is not None:
        budget, eps = exceeded
        raise BudgetExhaustedError(
            f'round {round_num} refused: privacy group {budget.name!r} would '
            f'spend epsilon={eps:.4g}, above its target '
            f'{budget.target_epsilon:.4g}.')
      sampled = sample_clients(client_ids, plan.sampling, sampling_seed,
                               round_num)
      row = dict.fromkeys(_columns(groups), None)
      row['round'] = round_num
      row['num_clients'] = len(sampled)
      if sampled:
        seeds = [_client_seed(seed, round_num, i) for i in range(len(sampled))]
        if cohort_size > 1:
          data = cohort.pack_round(
              [task.shuffled_train(c, s) for c, s in zip(sampled, seeds)],
              [plan.assignment.one_hot(c) for c in sampled],
              plan.assignment.num_groups, cohort_size)
        else:
          data = [client_work.make_client_data(task.train_dataset(c, s),
                                               plan.assignment.one_hot(c))
                  for c, s in zip(sampled, seeds)]
        if personalization is not None:
          _personalize(personalization, process.get_model_weights(state),
                       sampled, data, cohort_size)
        output = process.next(state, data)
        state = output.state
        agg = output.metrics['aggregator']
        work = output.metrics['client_work']
        row['clip_norm'] = float(agg['clip_norm'])
        row['fraction_clipped_estimate'] = float(
            agg['fraction_clipped_estimate'])
        row['train_loss'] = float(work['train']['loss'])
        acc = work['train'].get('sparse_categorical_accuracy')
        row['train_accuracy'] = None if acc is None else 100.0 * float(acc)
        row['num_non_finite_updates'] = int(work['num_non_finite_updates'])
        for j, g in enumerate(groups):
          row[f'count_{g.name}'] = int(agg['group_client_counts'][j])
          row[f'weight_{g.name}'] = float(agg['group_weights'][j])
          row[f'noise_std_{g.name}'] = float(agg['group_noise_stddev'][j])
      if plan.accounted:
        for j, g in enumerate(groups):
          row[f'epsilon_{g.name}'] = plan.ledger.epsilon(j, round_num)
      if round_num % eval_every == 0 or round_num == plan.rounds:
        metrics = _evaluate(task, process.get_model_weights(state),
                            private_flags, personalization)
        row.update(metrics)
        bar.set_postfix(acc_g=f"{metrics['acc_g']:.2f}")
      rows.append(row)
      if writer:
        writer.writerow({k: _fmt(row[k]) for k in columns})
        csv_file.flush()
      for manager in release_managers:
        asyncio.run(manager.release(_releasable(row, columns),
                                    key=round_num))
      if on_round is not None:
        on_round(round_num, process.get_model_weights(state))
      if checkpoint is not None and (round_num % checkpoint_every == 0 or
                                     round_num == plan.rounds):
        checkpoint.save(state, round_num,
                        personalization.models if personalization else None)
  finally:
    if csv_file:
      csv_file.close()
  weights = process.get_model_weights(state)
  if not metrics:  # Resumed after the last round: nothing was evaluated.
    metrics = _evaluate(task, weights, private_flags, personalization)
  if output_dir:
    save_model(os.path.join(output_dir, 'final_model.npz'), weights)
  seconds = time.time() - start
  epsilons = {g.name: plan.ledger.epsilon(j, plan.rounds)
              for j, g in enumerate(groups)}
  return RunResult(state, rows, metrics, epsilons, seconds)


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

  with open(path, 'w') as f:
    json.dump(clean(summary), f, indent=2)

"""One comparison of algorithms on one task, as the papers' tables run it.

The clients' privacy choices are drawn once (seeded) and shared by every
configuration; each configuration (algorithm, r) gets its own process, privacy
plan and output folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Sequence

import tensorflow_federated as tff

from tff_hdp.federated_task import FederatedTask
from tff_hdp.privacy import accounting
from tff_hdp.simulation import checkpointing
from tff_hdp.learning import cohort
from tff_hdp.learning import ditto
from tff_hdp.privacy import dp_randomness
from tff_hdp.learning import fedhdp
from tff_hdp.privacy import release_policy
from tff_hdp.simulation import round_loop
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.privacy_groups import PrivacyGroup
from tff_hdp.privacy.privacy_groups import assign_opt_out


# What a configuration's run raises for bad settings or data: entry points
# report these as one line.
RUN_ERRORS = (ValueError, accounting.InfeasiblePrivacyTargetError,
              checkpointing.CheckpointError, round_loop.BudgetExhaustedError)


@dataclasses.dataclass(frozen=True)
class DittoSettings:
  """Ditto on the clients: lambda_p for private groups, lambda_np otherwise."""

  lambda_p: float
  lambda_np: float
  learning_rate: float


@dataclasses.dataclass(frozen=True)
class Settings:
  """Training settings shared by all configurations of a comparison."""

  rounds: int
  sampling: accounting.Sampling
  local_epochs: int = 1
  client_lr: float = 0.1
  server_lr: float = 1.0
  clip: fedhdp.ClipSettings = fedhdp.ClipSettings()
  denominator: str = 'expected'
  seed: int = 0
  eval_every: int = 10
  checkpoint_every: int = 10  # 0: no checkpoints
  ditto: DittoSettings | None = None  # None: no personalization
  # > 1: simulate up to this many clients per TFF client (tff_hdp.learning.cohort),
  # the same rounds for a fraction of TFF's per-client overhead.
  cohort_size: int = 0
  # Each of these voids part of the privacy promise; a run that sets one
  # says so in its header and summary (`privacy_warnings`).
  release_unprotected_stats: bool = False  # tff_hdp.privacy.release_policy
  unsafe_seeded_dp_randomness: bool = False  # tff_hdp.privacy.dp_randomness
  allow_large_delta: bool = False  # accept delta >= 1 / N_j


def privacy_warnings(settings: Settings) -> list[str]:
  """The lines a run with these settings announces (`release_policy`)."""
  return release_policy.privacy_warnings(
      realized=settings.denominator == 'realized',
      unprotected=settings.release_unprotected_stats,
      seeded=settings.unsafe_seeded_dp_randomness,
      large_delta=settings.allow_large_delta)


@dataclasses.dataclass(frozen=True)
class Configuration:
  algorithm: str
  ratio: float | None = None

  @property
  def name(self) -> str:
    return (f'{self.algorithm}_r{self.ratio:g}' if self.ratio is not None else
            self.algorithm)


def client_choices(task: FederatedTask, levels: Sequence[PrivacyGroup],
                   opt_out_fraction: float, seed: int,
                   level_fractions: Sequence[float] | None = None
                   ) -> GroupAssignment:
  """The clients' own privacy choices: private levels plus an opt-out group."""
  return assign_opt_out(task.client_ids, levels, opt_out_fraction, seed,
                        private_fractions=level_fractions,
                        opt_out_pool=task.opt_out_pool)


def configurations(algorithms: Sequence[str], ratios: Sequence[float],
                   choices: GroupAssignment) -> list[Configuration]:
  """fedhdp once per r; the baselines once each."""
  del choices  # Every algorithm is defined for any set of choices.
  configs = []
  for algorithm in algorithms:
    if algorithm not in fedhdp.ALGORITHMS:
      raise ValueError(f'unknown algorithm {algorithm!r}; choose one of '
                       f'{fedhdp.ALGORITHMS}.')
    if algorithm == 'fedhdp':
      configs += [Configuration('fedhdp', float(r)) for r in ratios]
    else:
      configs.append(Configuration(algorithm))
  return configs


def _training_groups(config: Configuration,
                     choices: GroupAssignment) -> GroupAssignment:
  ratios = None
  if config.ratio is not None:
    ratios = [config.ratio if g.is_private else 1.0 for g in choices.groups]
  return fedhdp.groups_for_algorithm(config.algorithm, choices, ratios)


def _run_key(task: FederatedTask, config: Configuration,
             choices: GroupAssignment, settings: Settings) -> dict:
  """What makes two runs the same run (a checkpoint is only reused then)."""
  choice_text = repr(sorted((str(c), g) for c, g in
                            choices.client_groups.items()))
  key = dataclasses.asdict(settings)
  key.pop('checkpoint_every')  # how often to save does not change the run
  if not key['cohort_size']:
    key.pop('cohort_size')  # keeps checkpoints of earlier versions valid
  key.update(task=task.name, configuration=config.name,
             groups=repr(choices.groups),
             client_choices=hashlib.sha256(choice_text.encode()).hexdigest())
  return key


def run_configuration(task: FederatedTask, config: Configuration,
                      choices: GroupAssignment, settings: Settings,
                      output_dir: str | None,
                      progress: bool = True,
                      on_round=None,
                      release_managers=()
                      ) -> tuple[dict, tff.learning.models.ModelWeights]:
  """Trains one configuration; returns (and writes) its summary, and returns
  the final global model weights. `release_managers` get each round's row."""
  assignment = _training_groups(config, choices)
  plan = fedhdp.plan_privacy(assignment, settings.sampling, settings.rounds,
                             settings.clip, settings.denominator,
                             allow_large_delta=settings.allow_large_delta)
  run_dir = os.path.join(output_dir, config.name) if output_dir else None
  checkpoint = None
  if run_dir and settings.checkpoint_every > 0:
    checkpoint = checkpointing.RunCheckpoint(
        os.path.join(run_dir, 'checkpoints'),
        _run_key(task, config, choices, settings))
  secret = dp_randomness.run_seed(
      settings.seed, settings.unsafe_seeded_dp_randomness, checkpoint)
  cohorts = settings.cohort_size > 1
  aggregator = fedhdp.build_aggregator(plan, settings.clip, secret,
                                       cohort=cohorts)
  training = dict(
      client_optimizer=tff.learning.optimizers.build_sgdm(settings.client_lr),
      server_optimizer=tff.learning.optimizers.build_sgdm(settings.server_lr),
      local_epochs=settings.local_epochs)
  if cohorts:
    process = cohort.build_cohort_fedhdp(
        task.tff_model_fn(), aggregator, assignment.num_groups,
        batch_size=task.batch_size, **training)
  else:
    process = fedhdp.build_fedhdp(task.tff_model_fn(), aggregator,
                                  assignment.num_groups, **training)
  personalization = None
  if settings.ditto is not None:
    lambdas = [settings.ditto.lambda_p if g.is_private else
               settings.ditto.lambda_np for g in assignment.groups]
    if cohorts:
      step = ditto.build_cohort_personalization(
          task.tff_model_fn(), lambdas, settings.ditto.learning_rate,
          task.batch_size, settings.local_epochs)
    else:
      step = ditto.build_personalization(task.tff_model_fn(), lambdas,
                                         settings.ditto.learning_rate,
                                         settings.local_epochs)
    personalization = round_loop.Personalization(step)
  result = round_loop.run(
      task, process, plan, choices, seed=settings.seed, sampling_seed=secret,
      output_dir=run_dir,
      eval_every=settings.eval_every, progress=progress,
      checkpoint=checkpoint, checkpoint_every=settings.checkpoint_every,
      on_round=on_round, personalization=personalization,
      release_managers=release_managers, cohort_size=settings.cohort_size,
      release_unprotected=settings.release_unprotected_stats)
  metrics = result.final_metrics
  if not settings.release_unprotected_stats:
    metrics = {k: v for k, v in metrics.items()
               if k not in release_policy.PRIVATE_CLIENT_METRICS}
  fixed = isinstance(settings.sampling, accounting.FixedSizeSampling)
  summary = {
      'configuration': config.name,
      'algorithm': config.algorithm,
      'ratio': config.ratio,
      'task': task.name,
      'metric': task.metric,
      'ditto': dataclasses.asdict(settings.ditto) if settings.ditto else None,
      'dropped_clients': task.dropped_clients,
      'rounds': settings.rounds,
      'sampling': 'fixed' if fixed else 'poisson',
      'sampling_rate': settings.sampling.rate,
      'denominator': settings.denominator,
      'adjacency': 'replace one client' if fixed else 'add or remove one client',
      'privacy_accounted': plan.accounted,
      'privacy_warnings': privacy_warnings(settings),
      'groups': [{
          'name': g.name,
          'clients': int(n),
          'target_epsilon': g.epsilon,
          'delta': g.delta,
          'ratio': g.ratio,
          'noise_multiplier': z,
          'epsilon_spent': (result.epsilons[g.name] if plan.accounted
                            else None),
      } for g, n, z in zip(assignment.groups, assignment.group_sizes(),
                           plan.noise_multipliers)],
      'clip_count_stddev': plan.clip_count_stddev,
      'metrics': metrics,
      'seconds': result.seconds,
  }
  if run_dir:
    round_loop.write_summary(os.path.join(run_dir, 'summary.json'), summary)
  return summary, process.get_model_weights(result.state)


def completed_summary(task: FederatedTask, config: Configuration,
                      choices: GroupAssignment, settings: Settings,
                      output_dir: str) -> dict | None:
  """The summary of a finished run of exactly this configuration, or None.

  Lets a sweep skip what an earlier invocation finished. A summary of other
  rounds or another task counts as unfinished; a checkpoint of a different
  run in the folder is a CheckpointError, as resuming it would be.
  """
  run_dir = os.path.join(output_dir, config.name)
  try:
    with open(os.path.join(run_dir, 'summary.json')) as f:
      summary = json.load(f)
  except (OSError, ValueError):
    return None
  if not (isinstance(summary, dict) and
          summary.get('configuration') == config.name and
          summary.get('task') == task.name and
          summary.get('rounds') == settings.rounds and
          (summary.get('metrics') or {}).get('acc_g') is not None):
    return None
  if settings.checkpoint_every > 0:
    checkpointing.RunCheckpoint(
        os.path.join(run_dir, 'checkpoints'),
        _run_key(task, config, choices, settings)).check_key()
  return summary

"""One run of noise-aware FedAvg (SPEC.md §3) on any task, round by round.

Every client takes part in every round and runs one local epoch of DP-SGD at
its own epsilon and batch size (capped at its dataset size), drawn by seed or
listed by Robust-HDP's Dist1-Dist9 (`heterogeneity.client_budgets`); the
aggregation rule is picked by name. Each client's spend is its own, so the
summary reports the largest and smallest epsilon spent, both at most the
clients' targets.

A run resumes as the other settings' do (`checkpointing.RunCheckpoint`): the
process state holds the model, the round number every client folds into its
DP-SGD seed and the aggregator's state (Robust-HDP's frozen weights), and the
clients' seeds derive from the run's secret, kept beside it, so a killed and
re-run run equals an uninterrupted one bit for bit. An audit run
(`canaries`) also reports each client's empirical epsilon from the updates
it sent (`canary_audit.client_estimates`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tff_hdp.privacy import plans
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import dp_sgd
from tff_hdp.simulation import canary_audit
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import client_files
from tff_hdp.simulation import evaluation
from tff_hdp.privacy import heterogeneity
from tff_hdp.privacy import release_policy
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import run_lifecycle
from tff_hdp.simulation import runtime
from tff_hdp.simulation import selection
from tff_hdp.learning import algorithms
from tff_hdp.learning import noise_aware
from tff_hdp.federated_task import FederatedTask

@dataclasses.dataclass(frozen=True)
class UntrustedSettings(run_lifecycle.RunSettings):
  """An untrusted-server comparison's settings (with those of every run,
  `RunSettings`)."""

  epsilon_distribution: str = 'mixgauss1'
  delta: float = 1e-5
  learning_rate: float = 0.1
  clip_norm: float = 1.0
  # Also report the clients' local-test metrics, which no epsilon covers
  # (tff_hdp.privacy.release_policy).
  release_unprotected_stats: bool = False
  # Train only rounds 1..k of the `rounds` the noise is calibrated for: the
  # start of the whole run, at its noise (e.g. to choose a learning rate).
  train_rounds: int | None = None
  # The rules' options (registry `Option`s, e.g. robust_hdp's
  # rpca_freeze_after_round), by name; a missing one takes its default.
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  # How each client's epsilon is bounded (`plans.dp_sgd_accountant`): 'rdp'
  # or 'pld', at `pld_discretization` (None: per client, the coarsest of
  # 1e-3, 1e-4, ... within the tolerance).
  accountant: str = 'rdp'
  pld_discretization: float | None = None

  def __post_init__(self):
    if self.train_rounds is not None and not (
        1 <= self.train_rounds <= self.rounds):
      raise ValueError(f'train_rounds must be in [1, {self.rounds}] (the '
                       f'rounds), got {self.train_rounds}.')

  @property
  def rounds_trained(self) -> int:
    return self.train_rounds or self.rounds

  def as_dict(self) -> dict:
    """The settings as summaries and run keys hold them: each option of the
    setting's rules in place of `options` (its default where not given);
    the accountant only where it is not RDP, the one before there was a
    choice (so an RDP run's summary and key are those of earlier runs, which
    a figure's records compare)."""
    flat = dataclasses.asdict(self)
    del flat['options']
    if flat['accountant'] == 'rdp':
      del flat['accountant']
    if flat['pld_discretization'] is None:
      del flat['pld_discretization']
    flat.update({name: self.options.get(name, option.default) for name, option
                 in algorithms.setting_options(algorithms.UNTRUSTED).items()})
    return flat


def privacy_warnings(settings: UntrustedSettings) -> list[str]:
  """The lines a run with these settings announces (`release_policy`; an
  audit run's canaries too)."""
  return release_policy.privacy_warnings(
      unprotected=settings.release_unprotected_stats,
      seeded=settings.unsafe_seeded_dp_randomness,
      large_delta=settings.allow_large_delta) + canary_audit.example_notice(
          settings.canaries, 'client')


class UntrustedRounds(round_loop.RoundProgram):
  """Noise-aware FedAvg's rounds for `round_loop.run_rounds`: every client,
  every round, each reading its data in the order of the run's `--seed`
  (`train_dataset(client, seed)`: the task's own by default, or
  `client_files.ClientFiles`')."""

  def __init__(self, task: FederatedTask, process, state, plans, weights,
               client_seeds, settings: UntrustedSettings, label: str,
               files: client_files.ClientFiles | None = None,
               measurements: Sequence[release_policy.Measurement] = ()):
    """`files`: the clients' examples on local disk, read in place of the
    task's (and closed with the program). `measurements`: the aggregator's,
    reported as the last columns (its rule's record's). The metrics are
    those `release_policy.untrusted_metrics` releases."""
    self.label = label
    self._measurements = tuple(measurements)
    self._metrics = release_policy.untrusted_metrics(
        settings.release_unprotected_stats)
    self.columns = ('round', *self._metrics, 'max_epsilon_spent',
                    *(m.column for m in self._measurements))
    self.rounds = settings.rounds_trained
    self.state = state
    self._task, self._process, self._settings = task, process, settings
    self._plans, self._weights, self._seeds = plans, weights, client_seeds
    self._files = files
    self._train_dataset = files.train_dataset if files else task.train_dataset

  def restore(self, checkpoint: checkpointing.RunCheckpoint) -> int:
    # The state's TFF type: a rule's state may grow after round 1 (Robust-
    # HDP's frozen weights, float32[?], start empty).
    restored, done, _ = checkpoint.restore(
        self.state, state_type=self._process.initialize.type_signature.result)
    if restored is not None:
      self.state = restored
    return done

  def save(self, checkpoint: checkpointing.RunCheckpoint,
           round_num: int) -> None:
    checkpoint.save(self.state, round_num)

  @property
  def client_plans(self) -> tuple:
    """Each client's DP-SGD plan (`plans.ClientPrivacy`), in client order."""
    return tuple(self._plans)

  def train(self, round_num: int) -> dict:
    order = selection.every_client_order_seed(self._settings.seed, round_num)
    # In an audit run a client's index names its canaries.
    data = [dp_sgd.make_client_data(
        self._train_dataset(c, order), p, w, seed=s,
        index=i if self._settings.canaries else None)
            for i, (c, p, w, s) in enumerate(zip(
                self._task.client_ids, self._plans, self._weights,
                self._seeds))]
    output = self._process.next(self.state, data)
    self.state = output.state
    row = {'max_epsilon_spent': max(p.epsilon_after(round_num)
                                    for p in self._plans)}
    for m in self._measurements:
      row[m.column] = m.kind(output.metrics['aggregator'][m.name])
    return row

  def evaluate(self, round_num: int) -> dict:
    del round_num
    everyone_private = {c: True for c in self._task.client_ids}
    metrics = evaluation.global_model_metrics(self._task, self.weights(),
                                              everyone_private)
    return {name: metrics[name] for name in self._metrics}

  def weights(self):
    return self._process.get_model_weights(self.state)

  def close(self) -> None:
    if self._files:
      self._files.close()


def run_key(task: FederatedTask, algorithm: str,
            settings: UntrustedSettings) -> dict:
  """What makes two runs the same run (a checkpoint is only reused then):
  every setting but how often it is saved, the rule, the task's data and
  batch size, and the worker count."""
  key = {k: v for k, v in settings.as_dict().items()
         if k != 'checkpoint_every'}
  for added in ('canaries', 'train_rounds'):  # unset: keys from before them
    if not key[added]:
      del key[added]
  return runtime.with_worker_count(dict(
      key, task=task.name, algorithm=algorithm, batch_size=task.batch_size,
      data=task.data_digest, loss=task.loss_fn().name,
      conventions=plans.DP_SGD_CONVENTIONS))


def completed_summary(task: FederatedTask, algorithm: str,
                      settings: UntrustedSettings,
                      output_dir: str) -> dict | None:
  """The summary of a finished run of exactly this configuration, or None
  (`run_lifecycle.completed_summary`)."""
  return run_lifecycle.completed_summary(
      os.path.join(output_dir, algorithm), run_key(task, algorithm, settings))


def run_algorithm(task: FederatedTask, algorithm: str,
                  settings: UntrustedSettings, output_dir: str | None,
                  progress: bool = True) -> dict:
  """Trains with algorithm `algorithm` into `<output_dir>/<algorithm>`
  (`run_lifecycle`, the final model too); returns (and writes) a
  summary."""
  record = algorithms.record(algorithm, algorithms.UNTRUSTED)
  clients = task.client_ids
  n = len(clients)
  sizes = [task.num_train_examples(c) for c in clients]
  epsilons, batch_sizes = heterogeneity.client_budgets(
      settings.epsilon_distribution, n, settings.seed)
  batch_sizes = np.minimum(batch_sizes, sizes)
  client_plans = plans.plan_clients(
      noise_aware.client_epsilons(algorithm, epsilons),
      settings.delta, sizes, batch_sizes, settings.rounds,
      allow_large_delta=settings.allow_large_delta,
      accountant=settings.accountant,
      pld_discretization=settings.pld_discretization)
  num_params = task.num_trainable_parameters

  def build(claimed: run_lifecycle.ClaimedRun) -> UntrustedRounds:
    audit = canaries_lib.ExampleCanaries.create(
        canary_audit.directions_seed(settings.seed), num_params,
        settings.canaries, n) if settings.canaries else None
    loss = task.loss_fn()
    loss.reduction = tf.keras.losses.Reduction.NONE
    process = noise_aware.build_noise_aware_fedavg(
        task.tff_model_fn(), loss, noise_aware.build_aggregator(
            algorithm, **algorithms.factory_options(record, settings.options)),
        settings.learning_rate, settings.clip_norm, canaries=audit)
    round_loop.require_measurements(algorithm, process, record.measurements)
    weights = [noise_aware.client_weight(algorithm, p, settings.learning_rate,
                                         settings.clip_norm, num_params)
               for p in client_plans]
    # Clients' examples are read where the workers run, not sent every
    # round: from the task's own storage (a ClientData file at the same path
    # on every worker), else from local files when the workers share this
    # machine's disk.
    files = (client_files.ClientFiles(task) if runtime.workers_share_disk()
             and not task.clients.workers_read else None)
    # Each client's DP-SGD noise and example sampling follow its own seed,
    # derived from the run's secret (kept in the checkpoint) unless the run
    # is explicitly seeded.
    return UntrustedRounds(task, process, process.initialize(), client_plans,
                           weights, claimed.client_seeds(n), settings,
                           label=f'{algorithm} rounds', files=files,
                           measurements=record.measurements)

  def summarize(program: UntrustedRounds, result) -> dict:
    trained = settings.rounds_trained
    spent = [p.epsilon_after(trained) for p in client_plans]
    return {
        'configuration': algorithm,
        'task': task.name,
        'rounds': trained,
        'epsilon_distribution': settings.epsilon_distribution,
        'settings': settings.as_dict(),
        'privacy_warnings': privacy_warnings(settings),
        'target_epsilons': [p.epsilon for p in client_plans],
        'batch_sizes': [int(b) for b in batch_sizes],
        'epsilon_spent_max': max(spent),
        'epsilon_spent_min': min(spent),
        **plans.accountant_summary(client_plans, trained),
        **({'pld_discretizations': [p.accountant.discretization
                                    for p in client_plans]}
           if settings.accountant == 'pld' else {}),
        **(canary_audit.client_audit_summary(
            settings.canaries,
            dp_sgd.canary_scores(program.state.client_work), client_plans,
            spent, [p.steps_per_round * trained for p in client_plans],
            settings.delta, num_params) if settings.canaries else {}),
        'metrics': result.final_metrics,
    }

  summary, _ = run_lifecycle.run(
      os.path.join(output_dir, algorithm) if output_dir else None,
      run_key(task, algorithm, settings), settings, build, summarize,
      progress=progress, save_final_model=True)
  return summary

"""One comparison of algorithms on one task, as the papers' tables run it.

The clients' privacy choices are drawn once (seeded) and shared by every
configuration; each configuration (algorithm, r) gets its own process, privacy
plan and output folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.privacy import plans
from tff_hdp.federated_task import FederatedTask
from tff_hdp.learning import algorithms as registry
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import ditto
from tff_hdp.learning.execution import Execution
from tff_hdp.privacy import accounting
from tff_hdp.privacy import empirical_epsilon
from tff_hdp.privacy import min_separation
from tff_hdp.privacy import planner
from tff_hdp.privacy import release_policy
from tff_hdp.privacy.privacy_groups import GroupAssignment
from tff_hdp.privacy.privacy_groups import PrivacyGroup
from tff_hdp.privacy.privacy_groups import assign_opt_out
from tff_hdp.simulation import canary_audit
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import evaluation
from tff_hdp.simulation import folder_lock
from tff_hdp.simulation import participation
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import run_lifecycle
from tff_hdp.simulation import runtime
from tff_hdp.simulation import selection


# What a configuration's run raises for bad settings or data: entry points
# report these as one line.
RUN_ERRORS = (ValueError, accounting.InfeasiblePrivacyTargetError,
              checkpointing.CheckpointError, round_loop.BudgetExhaustedError,
              folder_lock.FolderInUseError)


@dataclasses.dataclass(frozen=True)
class DittoSettings:
  """Ditto on the clients: lambda_p for private groups, lambda_np otherwise."""

  lambda_p: float
  lambda_np: float
  learning_rate: float


@dataclasses.dataclass(frozen=True)
class Settings(run_lifecycle.RunSettings):
  """Training settings shared by all configurations of a comparison (with
  those of every run, `RunSettings`)."""

  sampling: accounting.Sampling
  local_epochs: int = 1
  client_lr: float = 0.1
  server_lr: float = 1.0
  clip: plans.ClipSettings = plans.ClipSettings()
  denominator: str = 'expected'
  ditto: DittoSettings | None = None  # None: no personalization
  # > 1: simulate up to this many clients per TFF client (tff_hdp.learning.cohort),
  # the same rounds for a fraction of TFF's per-client overhead.
  cohort_size: int = 0
  # Voids part of the privacy promise; a run that sets it says so in its
  # header and summary (`privacy_warnings`), as for the seeded randomness
  # and a large delta.
  release_unprotected_stats: bool = False  # tff_hdp.privacy.release_policy
  # The algorithms' options (registry `Option`s) other than swept ones.
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def privacy_warnings(settings: Settings) -> list[str]:
  """The lines a run with these settings announces (`release_policy`; an
  audit run's canaries too)."""
  return release_policy.privacy_warnings(
      realized=settings.denominator == 'realized',
      unprotected=settings.release_unprotected_stats,
      seeded=settings.unsafe_seeded_dp_randomness,
      large_delta=settings.allow_large_delta) + (
          [f'--canaries={settings.canaries}: ' +
           canary_audit.AUDIT_NOTICE.format(k=settings.canaries)]
          if settings.canaries else [])


@dataclasses.dataclass(frozen=True)
class Configuration:
  """One algorithm of a comparison, at `ratio`, the value of the option its
  record sweeps (FedHDP's r; None: not swept, or the levels' own)."""

  algorithm: str
  ratio: float | None = None

  @property
  def record(self) -> registry.Algorithm:
    return registry.record(self.algorithm, registry.TRUSTED)

  @property
  def name(self) -> str:
    if self.ratio is None:
      return self.algorithm
    label = registry.setting_options(registry.TRUSTED)[self.record.sweep].label
    return f'{self.algorithm}_{label}{self.ratio:g}'

  def options(self, settings: Settings) -> dict:
    """The option values the algorithm reads: the run's, and its swept
    value."""
    values = {o.name: settings.options.get(o.name, o.default)
              for o in self.record.options}
    if self.record.sweep:
      values[self.record.sweep] = self.ratio
    return values


def client_choices(task: FederatedTask, levels: Sequence[PrivacyGroup],
                   opt_out_fraction: float, seed: int,
                   level_fractions: Sequence[float] | None = None
                   ) -> GroupAssignment:
  """The clients' own privacy choices: private levels plus an opt-out group."""
  return assign_opt_out(task.client_ids, levels, opt_out_fraction, seed,
                        private_fractions=level_fractions,
                        opt_out_pool=task.opt_out_pool)


def configurations(algorithms: Sequence[str],
                   swept: Mapping[str, Sequence[float]]) -> list[Configuration]:
  """Each algorithm once per value of the option its record sweeps (the
  values `swept[option]`; None: not given, one configuration at the
  record's own rule), the others once each."""
  configs = []
  for algorithm in algorithms:
    sweep = registry.record(algorithm, registry.TRUSTED).sweep
    if sweep and swept.get(sweep) is not None:
      configs += [Configuration(algorithm, float(v)) for v in swept[sweep]]
    else:
      configs.append(Configuration(algorithm))
  return configs


def run_key(task: FederatedTask, config: Configuration,
             choices: GroupAssignment, settings: Settings) -> dict:
  """What makes two runs the same run (a checkpoint is only reused then)."""
  choice_text = repr(sorted((str(c), g) for c, g in
                            choices.client_groups.items()))
  key = dataclasses.asdict(settings)
  key.pop('checkpoint_every')  # how often to save does not change the run
  # Swept: in the name; not given: the record's own rule.
  key['options'] = {k: v for k, v in config.options(settings).items()
                    if k != config.record.sweep and v is not None}
  for optional in ('cohort_size', 'canaries', 'options'):
    if not key[optional]:
      key.pop(optional)  # keeps checkpoints of earlier versions valid
  key.update(task=task.name, batch_size=task.batch_size,
             data=task.data_digest, configuration=config.name,
             groups=repr(choices.groups),
             client_choices=hashlib.sha256(choice_text.encode()).hexdigest())
  return runtime.with_worker_count(key)


@dataclasses.dataclass
class Personalization:
  """A Ditto step (`Execution.build_personalization`) and the store of
  personal models it updates."""

  step: tff.Computation
  models: ditto.PersonalModels = dataclasses.field(
      default_factory=ditto.PersonalModels)


def _columns(groups, measurements) -> list[str]:
  """rounds.csv's columns: the round's, the aggregator's `measurements`
  (per run, then per group with each group's epsilon) and the metrics."""
  cols = ['round', 'num_clients',
          *(m.column for m in measurements if not m.per_group),
          'train_loss', 'train_accuracy', 'num_non_finite_updates']
  for g in groups:
    cols += [m.column.format(group=g.name) for m in measurements
             if m.per_group] + [f'epsilon_{g.name}']
  cols += ['acc_g', 'acc_g_p', 'var_g_p', 'acc_g_np', 'var_g_np', 'delta_g',
           'acc_l_p', 'var_l_p', 'acc_l_np', 'var_l_np', 'delta_l']
  return cols


class TrustedRounds(round_loop.RoundProgram):
  """FedHDP's rounds for `round_loop.run_rounds`.

  `plan.assignment` holds the groups the algorithm trains with;
  `client_choices` holds the clients' own choices, used for the private /
  non-private metrics so that all algorithms are scored alike. `seed` orders
  each client's data; `sampling_seed` (secret, see
  `tff_hdp.privacy.dp_randomness`) draws the clients of each round. With
  `personalization`, each sampled client also takes its Ditto steps from the
  round's global model, and the personalized metrics are reported.
  `execution` says how clients reach `process` (built by the same
  `Execution`); `measurements` are the aggregator's that each round reports
  (its algorithm's record's). `columns` are the statistics the printed
  epsilon covers (`release_policy.withheld_columns`), all of them with
  `release_unprotected`; in a run whose plan is not `accounted` the epsilon
  columns stay blank. With an `audit`, its canaries are drawn after the real
  clients in each round's one draw and sent after them (`plan` then counts
  them in their groups: `CanaryAudit.with_canaries`).
  """

  def __init__(self, task: FederatedTask,
               process: tff.learning.templates.LearningProcess,
               plan: plans.PrivacyPlan, client_choices: GroupAssignment, *,
               seed: int, sampling_seed: int,
               execution: Execution = Execution(),
               personalization: Personalization | None = None,
               release_unprotected: bool = False,
               audit: canary_audit.CanaryAudit | None = None,
               measurements: Sequence[release_policy.Measurement] = ()):
    self.label = f'{task.name} rounds'
    self.rounds = plan.rounds
    self.ledger = plan.ledger
    self._task, self._process = task, process
    self.process, self.plan = process, plan  # read by the summary
    self._seed, self._sampling_seed = seed, sampling_seed
    self._execution = execution
    self._personalization = personalization
    self._audit = audit
    self._population = list(task.client_ids) + (audit.ids() if audit else [])
    rates = np.asarray(plan.rates())
    self._client_rates = None if plan.group_rates is None else rates[
        [plan.assignment.group_of(c) for c in self._population]]
    self._schedule = _device_schedule(plan, self._population,
                                      sampling_seed)
    self._private_flags = {
        c: client_choices.groups[client_choices.group_of(c)].is_private
        for c in task.client_ids
    }
    groups = plan.assignment.groups
    self._measurements = tuple(measurements)
    withheld = (() if release_unprotected else
                release_policy.withheld_columns(
                    groups, plan.adaptive_clipping, self._measurements))
    self.columns = [c for c in _columns(groups, self._measurements)
                    if c not in withheld]
    self._released = frozenset(self.columns)
    # The measurements with a released column: the only ones read, so a
    # withheld one is not required of the factory.
    self.measurements_read = tuple(
        m for m in self._measurements
        if any(c in self._released for c in m.columns(groups)))
    self.state = process.initialize()

  def restore(self, checkpoint: checkpointing.RunCheckpoint) -> int:
    ids = self._task.client_ids if self._personalization else None
    # The state's TFF type: the tree's level buffer (float32[?, ...]) grows
    # with the rounds, so a saved state differs in size from a fresh one.
    restored, done, personal = checkpoint.restore(
        self.state, ids,
        state_type=self._process.initialize.type_signature.result)
    if restored is not None:
      self.state = restored
      if self._personalization is not None:
        self._personalization.models = personal
    return done

  def save(self, checkpoint: checkpointing.RunCheckpoint,
           round_num: int) -> None:
    checkpoint.save(self.state, round_num,
                    self._personalization.models
                    if self._personalization else None)

  def weights(self) -> tff.learning.models.ModelWeights:
    return self._process.get_model_weights(self.state)

  def train(self, round_num: int) -> dict:
    plan, groups = self.plan, self.plan.assignment.groups
    if self._schedule is not None:
      sampled = [self._population[i] for i in self._schedule[round_num - 1]]
    else:
      sampled = selection.sample_clients(self._population, plan.sampling,
                                         self._sampling_seed, round_num,
                                         self._client_rates)
    canaries = []
    if self._audit is not None:
      sampled, canaries = self._audit.split(sampled)
    row = dict.fromkeys(_columns(groups, self._measurements), None)
    row['num_clients'] = len(sampled) + len(canaries)
    seeds = [selection.sampled_client_order_seed(self._seed, round_num, i)
             for i in range(len(sampled))]
    # A round that sampled nobody still runs the noisy server computation
    # (`Execution.empty_round_data`): it releases what the ledger accounts.
    data = self._execution.round_data(
        self._task, sampled, seeds, plan.assignment,
        [(self._audit.row(c), plan.assignment.one_hot(c)) for c in canaries])
    if self._personalization is not None and sampled:
      self._execution.personalize(self._personalization.step,
                                  self._personalization.models,
                                  self.weights(), sampled, data)
    output = self._process.next(self.state, data)
    self.state = output.state
    agg = output.metrics['aggregator']
    work = output.metrics['client_work']
    # A withheld column is not read: the factory reports it as NaN, or not
    # at all.
    for m in self.measurements_read:
      values = agg[m.name] if m.per_group else [agg[m.name]]
      for column, value in zip(m.columns(groups), values):
        if column in self._released:
          row[column] = m.kind(value)
    if sampled:  # A mean over no client is no statistic.
      row['train_loss'] = float(work['train']['loss'])
      acc = work['train'].get('sparse_categorical_accuracy')
      row['train_accuracy'] = None if acc is None else 100.0 * float(acc)
    row['num_non_finite_updates'] = int(work['num_non_finite_updates'])
    if plan.accounted:
      for j, g in enumerate(groups):
        row[f'epsilon_{g.name}'] = plan.ledger.epsilon(j, round_num)
    return row

  def postfix(self, metrics: dict) -> dict[str, str]:
    if self._task.metric.endswith('accuracy'):
      return super().postfix(metrics)
    return {f'{self._task.metric}_g': f"{metrics['acc_g']:.4g}"}

  def evaluate(self, round_num: int) -> dict:
    del round_num
    metrics = evaluation.global_model_metrics(self._task, self.weights(),
                                              self._private_flags)
    if self._personalization is not None:
      metrics.update(evaluation.personalized_metrics(
          self._task, self.weights(), self._personalization.models,
          self._private_flags))
    return metrics


def _device_schedule(plan: plans.PrivacyPlan, population: Sequence,
                     seed: int) -> list[np.ndarray] | None:
  """Each round's clients (indices into `population`) when devices enforce
  their own participation (`participation.schedule_rounds`): a private
  group's devices keep the rule its budget is accounted under (the run's,
  or the group's own cap), a group without guarantee may take part every
  round. None when clients are sampled."""
  sampling = plan.sampling
  if not isinstance(sampling, min_separation.DeviceParticipation):
    return None
  models = [(budget.sampling or sampling).model(plan.rounds)
            if budget is not None else
            min_separation.MinSeparation(plan.rounds, 1, plan.rounds)
            for budget in plan.ledger.budgets]
  return participation.schedule_rounds(
      np.array([plan.assignment.group_of(c) for c in population]), models,
      sampling.clients_per_round, seed)


def run_configuration(task: FederatedTask, config: Configuration,
                      choices: GroupAssignment, settings: Settings,
                      output_dir: str | None,
                      progress: bool = True,
                      on_round=None,
                      release_managers=()
                      ) -> tuple[dict, tff.learning.models.ModelWeights]:
  """Trains one configuration into `<output_dir>/<name>` (`run_lifecycle`);
  returns (and writes) its summary, and returns the final global model
  weights. `release_managers` get each round's row."""
  record, options = config.record, config.options(settings)
  if settings.cohort_size > 1 and not record.cohorts:
    raise ValueError(f'--cohort_size: {config.algorithm} trains one TFF '
                     'client per client (its record runs no cohorts); drop '
                     '--cohort_size.')
  assignment = record.groups(choices, options)
  audit = _canary_audit(task, assignment, settings)
  clip = (dataclasses.replace(settings.clip, learning_rate=0.0)
          if record.fixed_clip else settings.clip)
  plan = (record.privacy_plan or plans.plan_privacy)(
      audit.with_canaries() if audit else assignment, settings.sampling,
      settings.rounds, clip, settings.denominator,
      allow_large_delta=settings.allow_large_delta)
  execution = Execution(settings.cohort_size,
                        audit.directions if audit else None)
  def build(claimed: run_lifecycle.ClaimedRun) -> TrustedRounds:
    secret = claimed.secret()
    built = record.build_factory(registry.TrustedContext(
        plan, clip, secret, execution.cohorts, options,
        task.num_trainable_parameters,
        release_unprotected_counts=settings.release_unprotected_stats))
    # The ledger accounts the noise the factory says it applies.
    applied = plans.with_noise(plan, built.noise.noise_multipliers,
                               built.noise.clip_count_stddev, built.ratios,
                               built.noise.participations)
    if built.ratios is not None and progress:
      print(_ratios_line(config.name, applied))
    if progress:
      for line in built.notes:
        print(f'{config.name}: {line}')
    process = execution.build_fedhdp(
        task.tff_model_fn(), built.factory, plan.assignment.num_groups,
        task.batch_size,
        client_optimizer=tff.learning.optimizers.build_sgdm(settings.client_lr),
        server_optimizer=tff.learning.optimizers.build_sgdm(settings.server_lr),
        local_epochs=settings.local_epochs)
    personalization = None
    if settings.ditto is not None:
      lambdas = [settings.ditto.lambda_p if g.is_private else
                 settings.ditto.lambda_np for g in assignment.groups]
      personalization = Personalization(execution.build_personalization(
          task.tff_model_fn(), lambdas, settings.ditto.learning_rate,
          task.batch_size, settings.local_epochs))
    program = TrustedRounds(
        task, process, applied, choices, seed=settings.seed,
        sampling_seed=secret, execution=execution,
        personalization=personalization,
        release_unprotected=settings.release_unprotected_stats, audit=audit,
        measurements=record.measurements)
    program.repeats_rounds = built.seeded
    round_loop.require_measurements(config.algorithm, process,
                                    program.measurements_read)
    return program

  def summarize(program: TrustedRounds, result) -> dict:
    return _summary(task, config, settings, program.plan, assignment,
                    audit, program, result)

  summary, program = run_lifecycle.run(
      os.path.join(output_dir, config.name) if output_dir else None,
      run_key(task, config, choices, settings), settings, build, summarize,
      progress=progress, save_final_model=True,
      release_managers=release_managers, on_round=on_round)
  return summary, program.weights()


def _ratios_line(name: str, plan: plans.PrivacyPlan) -> str:
  """The ratios a factory chose and the weights w_j = r_j D_j / sum_k r_k
  D_k they give the groups at their expected counts D_j = q N_j."""
  groups = plan.assignment.groups
  counts = np.array(plan.rates()) * plan.assignment.group_sizes()
  weights = np.array([g.ratio for g in groups]) * counts
  weights = weights / weights.sum() if weights.sum() > 0 else weights
  line = f'{name}: group ratios r_j (weights at the expected counts): ' + (
      ', '.join(f'{g.name} {g.ratio:.4g} ({w:.3f})'
                for g, w in zip(groups, weights)))
  if isinstance(plan.sampling, (accounting.PoissonSampling,
                                accounting.FixedSizeSampling)):
    released, private = planner.noise_divisors(plan)
    line += f'; noise on the mean S/{released:.1f}' + (
        '' if released == private else
        f' (on the private groups\' part S/{private:.1f})')
  if plan.group_rates is not None:
    line += (f'\n{name}: noise multiplier {max(plan.noise_multipliers):.4g} '
             'for every private group, each sampled at its own rate: ' +
             ', '.join(f'{g.name} {q:.4g}'
                       for g, q in zip(groups, plan.group_rates)))
  return line


# What a run's epsilon protects, by how clients take part.
_ADJACENCY = {
    'poisson': 'add or remove one client',
    'fixed': 'replace one client',
    'device': ('zero out one device (its updates replaced by zeros, which '
               'answer nothing to the clip count, in any rounds its '
               'participation rule allows)'),
}


def _accountant_fields(plan) -> dict:
  """summary.json's word on the bound its epsilons are: the accountant of
  the private groups (PLD with its discretization, RDP, or the device
  setting's exact Gaussian curve)."""
  used = {plan.ledger.accountant(j) for j, b in
          enumerate(plan.ledger.budgets) if b is not None}
  if not used:
    return {}
  if used == {'pld'}:
    return {'accountant': 'pld', 'pld_discretization':
            plan.sampling.accountant.discretization}
  return {'accountant': 'gaussian' if used == {None} else 'rdp'}


def _summary(task, config, settings, plan, assignment, audit, program,
             result) -> dict:
  """A finished configuration's summary.json."""
  epsilons = {g.name: plan.ledger.epsilon(j, plan.rounds)
              for j, g in enumerate(assignment.groups)}
  metrics = result.final_metrics
  if not settings.release_unprotected_stats:
    metrics = {k: v for k, v in metrics.items()
               if k not in release_policy.PRIVATE_CLIENT_METRICS}
  fixed = isinstance(settings.sampling, accounting.FixedSizeSampling)
  device = isinstance(settings.sampling, min_separation.DeviceParticipation)
  kind = 'device' if device else 'fixed' if fixed else 'poisson'
  empirical = _canary_estimates(program, audit) if audit else {}
  return {
      'configuration': config.name,
      'algorithm': config.algorithm,
      'ratio': config.ratio,
      'task': task.name,
      'metric': task.metric,
      'ditto': dataclasses.asdict(settings.ditto) if settings.ditto else None,
      'dropped_clients': task.dropped_clients,
      'rounds': settings.rounds,
      'sampling': kind,
      'sampling_rate': settings.sampling.rate,
      **({'participation': {
          'min_separation': settings.sampling.min_separation,
          'max_participations': settings.sampling.max_participations,
          'noise': type(plan.sampling.noise).__name__}} if device else {}),
      'denominator': settings.denominator,
      'adjacency': _ADJACENCY[kind],
      **_accountant_fields(plan),
      'privacy_accounted': plan.accounted,
      'privacy_warnings': privacy_warnings(settings),
      'groups': [{
          'name': g.name,
          'clients': int(n),
          'target_epsilon': g.epsilon,
          'delta': g.delta,
          'ratio': applied.ratio,
          'noise_multiplier': z,
          **({'sampling_rate': q} if plan.group_rates else {}),
          **({'max_participations': (budget.sampling or plan.sampling)
              .max_participations} if device and budget else {}),
          'epsilon_spent': (epsilons[g.name] if plan.accounted
                            else None),
          **({'epsilon_spent_rdp': plan.ledger.rdp_epsilon(j, plan.rounds)}
             if plan.accounted and plan.ledger.accountant(j) == 'pld'
             else {}),
          # The alarm reads the final model's scores: the all-rounds ones,
          # maxima over rounds, are not Gaussian-shaped.
          **({'canaries': settings.canaries,
              'empirical_epsilon': empirical[g.name],
              'audit_alarm': empirical_epsilon.alarm(
                  empirical[g.name]['final_model'], epsilons[g.name])}
             if g.name in empirical else {}),
      } for j, (g, applied, n, z, q, budget) in enumerate(zip(
          assignment.groups, plan.assignment.groups,
          assignment.group_sizes(), plan.noise_multipliers, plan.rates(),
          plan.ledger.budgets))],
      **({'canaries': {'per_group': settings.canaries,
                       'unseen_per_group': settings.canaries,
                       'confidence': canary_audit.CONFIDENCE}}
         if audit else {}),
      'clip_count_stddev': plan.clip_count_stddev,
      'metrics': metrics,
  }


def _canary_audit(task: FederatedTask, assignment: GroupAssignment,
                  settings: Settings) -> canary_audit.CanaryAudit | None:
  if not settings.canaries:
    return None
  if not isinstance(settings.sampling, (accounting.PoissonSampling,
                                        min_separation.DeviceParticipation)):
    raise ValueError('--canaries needs --sampling=poisson or device: '
                     'canaries take part as members do, each on its own '
                     '(a fixed-size draw would trade members for them).')
  return canary_audit.CanaryAudit.create(assignment, settings.canaries,
                                         settings.seed,
                                         task.num_trainable_parameters)


def _canary_estimates(program: TrustedRounds,
                      audit: canary_audit.CanaryAudit) -> dict[str, dict]:
  """Each private group's empirical epsilon: the canaries' cosines with the
  final model's change from the initial one, and their largest cosines with
  any round's change (kept in the process state)."""
  process = program.process
  initial = process.get_model_weights(process.initialize()).trainable
  final = program.weights().trainable
  delta = [np.asarray(f) - np.asarray(i) for f, i in zip(
      tf.nest.flatten(final), tf.nest.flatten(initial))]
  final_cosines = audit.directions.cosines(delta).numpy()
  max_cosines = np.asarray(program.state[canaries_lib.MAX_COSINES_KEY])
  return audit.estimates(final_cosines, max_cosines)


def completed_summary(task: FederatedTask, config: Configuration,
                      choices: GroupAssignment, settings: Settings,
                      output_dir: str) -> dict | None:
  """The summary of a finished run of exactly this configuration, or None
  (`run_lifecycle.completed_summary`)."""
  return run_lifecycle.completed_summary(
      os.path.join(output_dir, config.name),
      run_key(task, config, choices, settings), configuration=config.name,
      task=task.name, rounds=settings.rounds)

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

from tff_hdp import metrics as metrics_lib
from tff_hdp.privacy import plans
from tff_hdp.federated_task import FederatedTask
from tff_hdp.learning import algorithms as registry
from tff_hdp.learning import correlated_noise
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import ditto
from tff_hdp.learning.execution import Execution
from tff_hdp.privacy import accounting
from tff_hdp.privacy import ditto_lambdas
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
  """Ditto on the clients: lambda_p for private groups, lambda_np otherwise;
  with `level_lambdas` ({level name: lambda}, lambda_p None) each private
  level its own; with `noise_aware` (lambda_p, lambda_np None) each group the
  closed form's from public quantities (`ditto_lambdas.plan_lambdas`: the
  clients' update spread `heterogeneity`, the share `local_share` of it a
  client's own sampling noise)."""

  lambda_p: float | None
  lambda_np: float | None
  learning_rate: float
  level_lambdas: Mapping[str, float] | None = None
  noise_aware: bool = False
  local_share: float = 0.5
  heterogeneity: float = 1.0

  def group_lambdas(self, groups: Sequence[PrivacyGroup],
                    levels: Sequence[PrivacyGroup]) -> list[float]:
    """The lambda of each training group in `groups`: a group without
    guarantee lambda_np; a private one lambda_p, or its level's (a group
    that merges the `levels`, DP-FedAvg's, trains at the strictest level's
    noise: that level's lambda)."""
    if self.level_lambdas is None:
      return [self.lambda_p if g.is_private else self.lambda_np
              for g in groups]
    private = [g for g in levels if g.is_private]
    strictest = min(private, key=lambda g: (g.epsilon, g.delta)).name
    return [self.level_lambdas.get(g.name, self.level_lambdas[strictest])
            if g.is_private else self.lambda_np for g in groups]

  def record(self) -> dict:
    """As summary.json and the run key hold it (without the fields of
    per-group lambdas when not in use, as before they existed)."""
    out = dataclasses.asdict(self)
    if self.level_lambdas is None:
      out.pop('level_lambdas')
    if not self.noise_aware:
      for name in ('noise_aware', 'local_share', 'heterogeneity'):
        out.pop(name)
    return out


@dataclasses.dataclass(frozen=True)
class Settings(run_lifecycle.RunSettings):
  """Training settings shared by all configurations of a comparison (with
  those of every run, `RunSettings`)."""

  sampling: accounting.Sampling
  local_epochs: int = 1
  client_lr: float = 0.1
  server_lr: float = 1.0
  server_momentum: float = 0.0  # heavy-ball beta of the server's SGD
  clip: plans.ClipSettings = plans.ClipSettings()
  denominator: str = 'expected'
  ditto: DittoSettings | None = None  # None: no personalization
  # > 1: simulate up to this many clients per TFF client (tff_hdp.learning.cohort),
  # the same rounds for a fraction of TFF's per-client overhead.
  cohort_size: int = 0
  # > 0 (device participation): each round's devices fail to send with this
  # probability (`selection.finishing`), and the epsilons printed are those
  # the rounds gave (`plans.with_finished`).
  simulate_dropout: float = 0.0
  # Voids part of the privacy promise; a run that sets it says so in its
  # header and summary (`privacy_warnings`), as for the seeded randomness
  # and a large delta.
  release_unprotected_stats: bool = False  # tff_hdp.privacy.release_policy
  # The algorithms' options (registry `Option`s) other than swept ones.
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  # {privacy group of the clients' choices: its public labels}
  # (`privacy_groups.band_labels`): each group's Acc_g is scored on the
  # server's test examples of its labels. None where no group's labels are
  # public (levels drawn at random or read from a file): their label
  # counts are the clients' data, so nothing is scored per group.
  group_labels: Mapping[str, frozenset[int]] | None = None


def privacy_warnings(settings: Settings) -> list[str]:
  """The lines a run with these settings announces (`release_policy`; an
  audit run's canaries and a simulated dropout too)."""
  return release_policy.privacy_warnings(
      realized=settings.denominator == 'realized',
      unprotected=settings.release_unprotected_stats,
      seeded=settings.unsafe_seeded_dp_randomness,
      large_delta=settings.allow_large_delta) + (
          [f'--canaries={settings.canaries}: ' +
           canary_audit.AUDIT_NOTICE.format(k=settings.canaries)]
          if settings.canaries else []) + (
              [f'--simulate_dropout={settings.simulate_dropout:g}: '
               + DROPOUT_NOTICE] if settings.simulate_dropout else [])


DROPOUT_NOTICE = (
    'each device of a round fails to send its update with that probability; '
    'a rule whose devices add the noise (fedhdp_ddp, every slot per group) '
    'prints the epsilons its rounds gave, above the targets its plan met '
    'for rounds that every device finishes.')


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
  key['ditto'] = settings.ditto.record() if settings.ditto else None
  key.pop('checkpoint_every')  # how often to save does not change the run
  # Swept: in the name; not given: the record's own rule.
  key['options'] = {k: v for k, v in config.options(settings).items()
                    if k != config.record.sweep and v is not None}
  if settings.group_labels:  # rounds.csv gets a column per group
    key['group_labels'] = {g: sorted(labels) for g, labels in
                           settings.group_labels.items()}
  for optional in ('cohort_size', 'canaries', 'options', 'group_labels',
                   'simulate_dropout'):
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
  lambdas: tuple[float, ...] = ()  # each training group's


def _columns(groups, measurements, group_labels=None) -> list[str]:
  """rounds.csv's columns: the round's, the aggregator's `measurements`
  (per run, then per group with each group's epsilon) and the metrics
  (with `group_labels`, the worst group's and each group's Acc_g on its
  labels after Acc_g)."""
  cols = ['round', 'num_clients',
          *(m.column for m in measurements if not m.per_group),
          'train_loss', 'train_accuracy', 'num_non_finite_updates']
  for g in groups:
    cols += [m.column.format(group=g.name) for m in measurements
             if m.per_group] + [f'epsilon_{g.name}']
  cols += ['acc_g']
  if group_labels:
    cols += [metrics_lib.WORST_GROUP_COLUMN] + [
        metrics_lib.GROUP_COLUMN.format(group=g) for g in group_labels]
  cols += ['acc_g_p', 'var_g_p', 'acc_g_np', 'var_g_np', 'delta_g',
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
  them in their groups: `CanaryAudit.with_canaries`). With `group_labels`
  (`Settings.group_labels`) each evaluation scores every group of
  `client_choices` on its labels too.
  """

  def __init__(self, task: FederatedTask,
               process: tff.learning.templates.LearningProcess,
               plan: plans.PrivacyPlan, client_choices: GroupAssignment, *,
               seed: int, sampling_seed: int,
               execution: Execution = Execution(),
               personalization: Personalization | None = None,
               release_unprotected: bool = False,
               audit: canary_audit.CanaryAudit | None = None,
               measurements: Sequence[release_policy.Measurement] = (),
               group_labels: Mapping[str, frozenset[int]] | None = None,
               dropout: float = 0.0):
    self.label = f'{task.name} rounds'
    self.rounds = plan.rounds
    self.ledger = plan.ledger
    self._task, self._process = task, process
    self.process, self.plan = process, plan  # read by the summary
    self._seed, self._sampling_seed = seed, sampling_seed
    self._execution = execution
    self.personalization = personalization  # read by the summary too
    self._audit = audit
    self._group_labels = group_labels
    self._population = list(task.client_ids) + (audit.ids() if audit else [])
    rates = np.asarray(plan.rates())
    self._client_rates = None if plan.group_rates is None else rates[
        [plan.assignment.group_of(c) for c in self._population]]
    self._schedule = _device_schedule(plan, self._population,
                                      sampling_seed)
    if dropout and self._schedule is None:
      raise ValueError('a simulated dropout needs devices that take part in '
                       'rounds of exactly clients_per_round (--sampling='
                       'device).')
    # Which of each round's devices send (rounds of exactly
    # clients_per_round), public: the server sees who fails to.
    self._sent = None if not dropout else [
        selection.finishing(seed, t, plan.sampling.clients_per_round, dropout)
        for t in range(1, plan.rounds + 1)]
    self.finished = None if not dropout else [
        int(sent.sum()) for sent in self._sent]
    # The epsilons printed: the plan's, or, in a run whose devices drop
    # out, those of the rounds as they ran (the budget guard, `ledger`,
    # keeps the plan's: no server can know a round's dropouts before it).
    self.given = plan if not dropout else plans.with_finished(
        plan, self.finished)
    self._private_flags = {
        c: client_choices.groups[client_choices.group_of(c)].is_private
        for c in task.client_ids
    }
    self._levels = _personal_levels(client_choices, task.client_ids,
                                    personalization)
    groups = plan.assignment.groups
    self._measurements = tuple(measurements)
    withheld = (() if release_unprotected else
                release_policy.withheld_columns(
                    groups, plan.adaptive_clipping, self._measurements))
    self.columns = [c for c in _columns(groups, self._measurements,
                                        group_labels) +
                    _level_columns(self._levels)
                    if c not in withheld and (
                        release_unprotected or
                        not release_policy.is_private_client_metric(c))]
    self._released = frozenset(self.columns)
    # The measurements with a released column: the only ones read, so a
    # withheld one is not required of the factory.
    self.measurements_read = tuple(
        m for m in self._measurements
        if any(c in self._released for c in m.columns(groups)))
    self.state = process.initialize()

  def restore(self, checkpoint: checkpointing.RunCheckpoint) -> int:
    ids = self._task.client_ids if self.personalization else None
    # The state's TFF type: the tree's level buffer (float32[?, ...]) grows
    # with the rounds, so a saved state differs in size from a fresh one.
    restored, done, personal = checkpoint.restore(
        self.state, ids,
        state_type=self._process.initialize.type_signature.result)
    if restored is not None:
      self.state = restored
      if self.personalization is not None:
        self.personalization.models = personal
    return done

  def save(self, checkpoint: checkpointing.RunCheckpoint,
           round_num: int) -> None:
    checkpoint.save(self.state, round_num,
                    self.personalization.models
                    if self.personalization else None)

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
    if self._sent is not None:
      sampled = [c for c, sent in zip(sampled, self._sent[round_num - 1])
                 if sent]
    canaries = []
    if self._audit is not None:
      sampled, canaries = self._audit.split(sampled)
    row = dict.fromkeys(_columns(groups, self._measurements,
                                 self._group_labels), None)
    row['num_clients'] = len(sampled) + len(canaries)
    seeds = [selection.sampled_client_order_seed(self._seed, round_num, i)
             for i in range(len(sampled))]
    # A round that sampled nobody still runs the noisy server computation
    # (`Execution.empty_round_data`): it releases what the ledger accounts.
    data = self._execution.round_data(
        self._task, sampled, seeds, plan.assignment,
        [(self._audit.row(c), plan.assignment.one_hot(c)) for c in canaries])
    if self.personalization is not None and sampled:
      self._execution.personalize(self.personalization.step,
                                  self.personalization.models,
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
        row[f'epsilon_{g.name}'] = self.given.ledger.epsilon(j, round_num)
    return row

  def postfix(self, metrics: dict) -> dict[str, str]:
    if self._task.metric.endswith('accuracy'):
      return super().postfix(metrics)
    return {f'{self._task.metric}_g': f"{metrics['acc_g']:.4g}"}

  def evaluate(self, round_num: int) -> dict:
    del round_num
    metrics = evaluation.global_model_metrics(
        self._task, self.weights(), self._private_flags, self._group_labels)
    if self.personalization is not None:
      metrics.update(evaluation.personalized_metrics(
          self._task, self.weights(), self.personalization.models,
          self._private_flags, self._levels))
    return metrics


def _personal_levels(choices: GroupAssignment, client_ids,
                     personalization: Personalization | None
                     ) -> dict | None:
  """Each private client's level name, where Ditto runs over two or more
  private levels (the per-level personalized metrics); None otherwise."""
  private = [j for j, g in enumerate(choices.groups) if g.is_private]
  if personalization is None or len(private) < 2:
    return None
  scored = set(client_ids)
  # Level by level, so the levels come in --epsilons order.
  return {c: choices.groups[j].name for j in private
          for c in choices.members(j) if c in scored}


def _level_columns(levels: dict | None) -> list[str]:
  """rounds.csv's per-level personalized columns (`_personal_levels`)."""
  if levels is None:
    return []
  return [release_policy.LEVEL_PERSONAL_PREFIX + name
          for name in dict.fromkeys(levels.values())] + [
              release_policy.WORST_LEVEL_PERSONAL]


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
  plan = record.plan_privacy(
      audit.with_canaries() if audit else assignment, settings.sampling,
      settings.rounds, clip, settings.denominator,
      allow_large_delta=settings.allow_large_delta, options=options,
      num_parameters=task.num_trainable_parameters)
  execution = Execution(settings.cohort_size,
                        audit.directions if audit else None)
  def build(claimed: run_lifecycle.ClaimedRun) -> TrustedRounds:
    secret = claimed.secret()
    built = record.build_factory(registry.TrustedContext(
        plan, clip, secret, execution.cohorts, options,
        task.num_trainable_parameters,
        release_unprotected_counts=settings.release_unprotected_stats))
    if record.device_only:  # its plan accounts a strategy: the factory's?
      correlated_noise.check_applied_noise(config.algorithm, plan,
                                           built.factory)
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
        server_optimizer=tff.learning.optimizers.build_sgdm(
            settings.server_lr, momentum=settings.server_momentum or None),
        local_epochs=settings.local_epochs)
    personalization = None
    if settings.ditto is not None:
      lambdas = _ditto_lambdas(settings, applied, choices,
                               task.num_trainable_parameters)
      if settings.ditto.noise_aware and progress:
        print(_lambdas_line(config.name, applied, lambdas, settings))
      personalization = Personalization(execution.build_personalization(
          task.tff_model_fn(), lambdas, settings.ditto.learning_rate,
          task.batch_size, settings.local_epochs), lambdas=tuple(lambdas))
    program = TrustedRounds(
        task, process, applied, choices, seed=settings.seed,
        sampling_seed=secret, execution=execution,
        personalization=personalization,
        release_unprotected=settings.release_unprotected_stats, audit=audit,
        measurements=record.measurements,
        group_labels=settings.group_labels,
        dropout=settings.simulate_dropout)
    program.repeats_rounds = built.seeded
    round_loop.require_measurements(config.algorithm, process,
                                    program.measurements_read)
    return program

  def summarize(program: TrustedRounds, result) -> dict:
    summary = _summary(task, config, settings, program.given, assignment,
                       audit, program, result)
    if progress and settings.simulate_dropout:
      for line in _dropout_lines(config.name, program):
        print(line)
    return summary

  summary, program = run_lifecycle.run(
      os.path.join(output_dir, config.name) if output_dir else None,
      run_key(task, config, choices, settings), settings, build, summarize,
      progress=progress, save_final_model=True,
      release_managers=release_managers, on_round=on_round)
  return summary, program.weights()


def _ditto_lambdas(settings: Settings, plan: plans.PrivacyPlan,
                   choices: GroupAssignment,
                   num_parameters: int) -> list[float]:
  """Ditto's lambda for each of `plan`'s groups: given, or (noise-aware)
  the closed form's from the plan's public noise, counts and ratios."""
  ditto_settings = settings.ditto
  if ditto_settings.noise_aware:
    return list(ditto_lambdas.stepped_lambdas(ditto_lambdas.plan_lambdas(
        plan, num_parameters, ditto_settings.heterogeneity,
        ditto_settings.local_share), ditto_settings.learning_rate))
  return ditto_settings.group_lambdas(plan.assignment.groups, choices.groups)


def _lambdas_line(name: str, plan: plans.PrivacyPlan, lambdas,
                  settings: Settings) -> str:
  """The noise-aware Ditto lambdas, printed before training."""
  return (f'{name}: Ditto lambdas from the noise (heterogeneity '
          f'{settings.ditto.heterogeneity:g}, local share '
          f'{settings.ditto.local_share:g}): ' + ', '.join(
              f'{g.name} {lam:.4g}'
              for g, lam in zip(plan.assignment.groups, lambdas)))


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
  if plan.tilt is not None:
    line += (f'\n{name}: one noise draw on sum_j a_j x group j\'s clipped '
             'sum; per group a_j, its rate q_j and noise multiplier z / a_j: '
             + ', '.join(f'{g.name} {a:.4g}, {q:.4g}, {z:.4g}' for g, a, q, z
                         in zip(groups, plan.group_scales, plan.group_rates,
                                plan.noise_multipliers)))
    line += '\n' + '\n'.join(f'{name}: {row}'
                               for row in frontier_lines(plan))
  elif plan.group_rates is not None:
    line += (f'\n{name}: noise multiplier {max(plan.noise_multipliers):.4g} '
             'for every private group, each sampled at its own rate: ' +
             ', '.join(f'{g.name} {q:.4g}'
                       for g, q in zip(groups, plan.group_rates)))
  return line


def frontier_lines(plan: plans.PrivacyPlan) -> list[str]:
  """The frontier of a frontier plan, one line per point: t, the noise on
  the mean S/F and the worst group's bound B / S^2, the plan's own t
  marked."""
  return ['frontier (t, noise on the mean, worst group\'s bound '
          'max_k B_k / S^2): ' + '; '.join(
              f'{p.tilt:g} S/{p.divisor:.1f} {p.worst_bound:.4g}' +
              (' *' if p.tilt == plan.tilt else '') for p in plan.frontier),
          f'tilt t = {plan.tilt:g} (*)']


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


def _ditto_record(settings: Settings, program: TrustedRounds) -> dict | None:
  """summary.json's Ditto settings, with each group's lambda where they
  differ by level."""
  if settings.ditto is None:
    return None
  out = settings.ditto.record()
  if settings.ditto.level_lambdas is not None or settings.ditto.noise_aware:
    out['group_lambdas'] = dict(zip(
        (g.name for g in program.plan.assignment.groups),
        program.personalization.lambdas))
  return out


def _dropout_lines(name: str, program: TrustedRounds) -> list[str]:
  """Each private group's epsilon as its rounds ran, where devices
  dropping out raised it above the plan's."""
  rounds, lines = program.rounds, []
  for j, g in enumerate(program.plan.assignment.groups):
    if g.is_private and program.plan.accounted:
      planned = program.plan.ledger.epsilon(j, rounds)
      given = program.given.ledger.epsilon(j, rounds)
      if given > planned:
        lines.append(f'{name}: {g.name} gave eps {given:.4g} as its devices '
                     f'dropped out (--simulate_dropout), against '
                     f'{planned:.4g} had every device finished.')
  return lines


def _summary(task, config, settings, plan, assignment, audit, program,
             result) -> dict:
  """A finished configuration's summary.json."""
  epsilons = {g.name: plan.ledger.epsilon(j, plan.rounds)
              for j, g in enumerate(assignment.groups)}
  metrics = result.final_metrics
  if not settings.release_unprotected_stats:
    metrics = {k: v for k, v in metrics.items()
               if not release_policy.is_private_client_metric(k)}
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
      'ditto': _ditto_record(settings, program),
      'dropped_clients': task.dropped_clients,
      **({'simulated_dropout': {
          'probability': settings.simulate_dropout,
          'devices_finished': program.finished}}
         if settings.simulate_dropout else {}),
      'rounds': settings.rounds,
      'sampling': kind,
      'sampling_rate': settings.sampling.rate,
      **({'tilt': plan.tilt,
          'noise_divisor': planner.noise_divisors(plan)[0]}
         if plan.tilt is not None else {}),
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
          **({'epsilon_if_every_device_finished':
              program.plan.ledger.epsilon(j, plan.rounds)}
             if settings.simulate_dropout and budget and plan.accounted
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
      **({'group_labels': {g: sorted(labels) for g, labels in
                           settings.group_labels.items()}}
         if settings.group_labels else {}),
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

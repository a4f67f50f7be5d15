"""One run of a cross-silo algorithm under silo-specific sample-level DP
(SPEC.md §2).

Every silo takes part in every round. Each silo's DP-SGD noise multiplier is
calibrated for its own (epsilon, delta), sampling rate `B / n_k` and the
epochs the algorithm reads its data for (Ditto: two per round), minus what IFCA's
private cluster selections spend, so every algorithm runs at the same total
privacy cost; the summary reports each silo's epsilon spent. The metric is the
MR-MTL paper's: the silos' test metrics averaged with weights equal to their
test counts, each silo scored with the model it would deploy (its personal
model, the global model, or its cluster's model). An audit run
(`canaries`) also reports each silo's empirical epsilon from the updates it
sent (`canary_audit.client_estimates`).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import math
import os
from typing import Hashable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tqdm

from tff_hdp.privacy.plans import DP_SGD_CONVENTIONS, ClientPrivacy
from tff_hdp.privacy.plans import accountant_summary
from tff_hdp.privacy.plans import dp_sgd_accountant
from tff_hdp.privacy.plans import plan_client_privacy
from tff_hdp.privacy import ditto_lambdas
from tff_hdp.privacy import silo_lambdas
from tff_hdp.simulation import canary_audit
from tff_hdp.simulation import checkpointing
from tff_hdp.learning import cross_silo_process
from tff_hdp.learning import algorithms
from tff_hdp.learning import canaries as canaries_lib
from tff_hdp.learning import ditto
from tff_hdp.learning import dp_sgd
from tff_hdp.learning.execution import Execution
from tff_hdp.simulation import evaluation
from tff_hdp.privacy import release_policy
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import run_lifecycle
from tff_hdp.simulation import runtime
from tff_hdp.simulation import selection
from tff_hdp.federated_task import FederatedTask

# The MR-MTL paper's grids (its Appendix C.4).
LAMBDA_GRID = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)
LEARNING_RATE_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3)
# Beside the runs of an output folder: every silo calibration made there.
CALIBRATIONS_FILE = 'silo_noise_calibrations.json'
# The stored noise multipliers the accountant is asked to confirm. Outside
# this range a value is not a calibration (at infinity the accountant never
# returns; from about 1e154 on, z^2 overflows) and is dropped at once: the
# silo is calibrated afresh, which a genuine z above 1e6 would also cost.
STORED_Z_RANGE = (1e-4, 1e6)


@dataclasses.dataclass(frozen=True)
class CrossSiloSettings(run_lifecycle.RunSettings):
  """One run (with the settings of every run, `RunSettings`). `epsilons`
  holds one value for every silo or one per silo.

  IFCA selects clusters privately in the first `selection_fraction` of the
  rounds, each selection at `selection_share * epsilon_k`.
  """

  epsilons: tuple[float, ...]
  delta: float
  learning_rate: float
  clip_norm: float
  regularization: float = 0.0
  num_clusters: int = 4
  selection_fraction: float = 0.1
  selection_share: float = 0.03
  weighted: bool = True
  # > 1: up to this many silos per TFF client (tff_hdp.learning.execution).
  cohort_size: int = 0
  # Where the pull lambda (w - w_bar) joins DP-SGD's gradient
  # (tff_hdp.learning.dp_sgd.REGULARIZER_PLACEMENTS).
  regularizer_placement: str = 'per_example'
  # How each silo's epsilon is bounded (`plans.dp_sgd_accountant`): 'rdp' or
  # 'pld' at `pld_discretization` (None: per silo, the coarsest of 1e-3,
  # 1e-4, ... within the tolerance). IFCA's silos stay with RDP, which
  # composes its selections.
  accountant: str = 'rdp'
  pld_discretization: float | None = None
  # (epsilon, lambda) pairs: each silo the lambda of its epsilon instead of
  # `regularization` (None: `regularization` for every silo).
  epsilon_lambdas: tuple[tuple[float, float], ...] | None = None
  # Each silo the closed form's lambda from its public DP-SGD plan and the
  # silos' assumed spread `heterogeneity` (`privacy.silo_lambdas`) instead
  # of `regularization`.
  noise_aware_lambdas: bool = False
  heterogeneity: float = 1.0

  def silo_lambda(self, epsilon: float) -> float:
    """The lambda of a silo at `epsilon`."""
    if self.epsilon_lambdas is None:
      return self.regularization
    return dict(self.epsilon_lambdas)[epsilon]

  def silo_epsilons(self, num_silos: int) -> tuple[float, ...]:
    """Each silo's target: the one value repeated, or the given list."""
    return self.epsilons * (num_silos // len(self.epsilons))

  def selection_rounds(self, algorithm: algorithms.Algorithm) -> int:
    if not algorithm.clustered:
      return 0
    return max(1, math.ceil(self.selection_fraction * self.rounds))


def _check(task: FederatedTask, algorithm: algorithms.Algorithm,
           settings: CrossSiloSettings) -> None:
  if settings.rounds < 1:
    raise ValueError(f'--rounds must be >= 1, got {settings.rounds}.')
  k = len(task.client_ids)
  if len(settings.epsilons) not in (1, k):
    raise ValueError(f'--epsilons needs one value or one per silo ({k}), got '
                     f'{len(settings.epsilons)}.')
  small = min(task.num_train_examples(c) for c in task.client_ids)
  if not (settings.delta < small**-1.1 or settings.allow_large_delta):
    raise ValueError(
        f'--deltas={settings.delta:g} must be below n_k^-1.1 for every silo; '
        f'the smallest silo has {small} examples (bound {small**-1.1:.3g}); '
        'pass --unsafe_allow_large_delta to accept it for an experiment.')
  if settings.regularization < 0:
    raise ValueError(f'lambda must be >= 0, got {settings.regularization}.')
  if settings.noise_aware_lambdas and (
      settings.epsilon_lambdas is not None or
      not 0 < settings.heterogeneity < math.inf):
    raise ValueError('noise-aware lambdas need a finite heterogeneity > 0 '
                     'and no lambdas by epsilon.')
  if settings.epsilon_lambdas is not None:
    given = dict(settings.epsilon_lambdas)
    missing = set(settings.epsilons) - set(given)
    if missing or min(given.values()) < 0:
      raise ValueError(f'a lambda >= 0 for every silo epsilon is needed, got '
                       f'{given} for the silos at {sorted(settings.epsilons)}.')
  if algorithm.clustered:
    if settings.num_clusters < 1:
      raise ValueError('--num_clusters must be >= 1, got '
                       f'{settings.num_clusters}.')
    if task.metric_record.per_example_error is None:
      raise ValueError(f'{algorithm.name} selects clusters by error rate, which '
                       f'task {task.name!r} (a regression) does not have.')
    if not 0 < settings.selection_share < 1:
      raise ValueError('--selection_share must be in (0, 1), got '
                       f'{settings.selection_share}.')
    if not 0 < settings.selection_fraction <= 1:
      raise ValueError('--selection_fraction must be in (0, 1], got '
                       f'{settings.selection_fraction}.')


def plan_silos(task: FederatedTask, algorithm: algorithms.Algorithm,
               settings: CrossSiloSettings,
               progress: bool = False,
               calibrations: str | None = None) -> list[ClientPrivacy]:
  """Each silo's DP-SGD plan at its own budget for this algorithm's reads.

  `calibrations` is a JSON file of earlier calibrations (z by the plan's
  parameters), read and extended here, so that a resumed run or a sweep's
  next process does not calibrate every silo again (about 3 minutes for
  School's 139); each stored z is confirmed by the accountant before use,
  and one that is not a number in `STORED_Z_RANGE` is not even tried.
  """
  _check(task, algorithm, settings)
  epsilons = settings.silo_epsilons(len(task.client_ids))
  selections = settings.selection_rounds(algorithm)
  low, high = STORED_Z_RANGE
  known = {k: float(v)
           for k, v in checkpointing.read_json_dict(calibrations).items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and
           low < v <= high}
  accountant, finer = dp_sgd_accountant(settings.accountant,
                                       settings.pld_discretization)
  plans = []
  for c, eps in tqdm.tqdm(list(zip(task.client_ids, epsilons)),
                          desc='calibrating silos\' noise', unit='silo',
                          disable=not progress, leave=False):
    n = task.num_train_examples(c)
    args = (float(eps), float(settings.delta), n, min(task.batch_size, n),
            settings.rounds, 2 if algorithm.personal_epoch else 1,
            float(settings.selection_share * eps), selections,
            settings.allow_large_delta)
    # The key holds the accountant (RDP's as before it was in it).
    stored = json.dumps(args + ((settings.accountant,
                                 settings.pld_discretization)
                                if settings.accountant != 'rdp' else ()))
    plans.append(plan_client_privacy(
        *args, known_noise_multiplier=known.get(stored),
        accountant=accountant, finer_if_loose=finer))
    known[stored] = plans[-1].noise_multiplier
  if calibrations:
    checkpointing.write_json_atomically(calibrations, known)
  return plans


def _level_metrics(task: FederatedTask, settings: CrossSiloSettings,
                   program: 'CrossSiloRounds') -> dict:
  """With silos at several epsilons, the final metric at each
  (`metric_by_epsilon`) and the worst of them; nothing otherwise."""
  epsilons = settings.silo_epsilons(len(task.client_ids))
  if len(set(epsilons)) < 2:
    return {}
  # The final evaluation's scores (the round loop always ends with one).
  by_level = metric_by_epsilon(program.scores, task.client_ids, epsilons)
  worst = None
  for value in by_level.values():
    if worst is None or task.metric_record.better(worst, value):
      worst = value
  return {'metric_by_epsilon': by_level, 'metric_worst_epsilon': worst}


def _switch_round(algorithm: algorithms.Algorithm, settings: CrossSiloSettings) -> int | None:
  """The last round of the first phase (FedAvg / IFCA), if there are two."""
  if algorithm.first_phase == 'half_of_rounds':
    return settings.rounds // 2
  if algorithm.first_phase == 'selection_rounds':
    return settings.selection_rounds(algorithm)
  return None


def silo_pulls(task: FederatedTask, algorithm: algorithms.Algorithm,
               settings: CrossSiloSettings,
               plans: list[ClientPrivacy]) -> list[float]:
  """Each silo's lambda: 0 for an algorithm without the pull, the closed
  form's from the silos' public plans (`noise_aware_lambdas`, at most 1 /
  the learning rate: `ditto_lambdas.stepped_lambdas`), else its epsilon's
  (`silo_lambda`)."""
  if not algorithm.regularized:
    return [0.0] * len(plans)
  if settings.noise_aware_lambdas:
    return list(ditto_lambdas.stepped_lambdas(silo_lambdas.plan_lambdas(
        plans, task.num_trainable_parameters, settings.heterogeneity,
        settings.weighted), settings.learning_rate))
  return [settings.silo_lambda(e)
          for e in settings.silo_epsilons(len(plans))]


def _role(algorithm: algorithms.Algorithm, settings: CrossSiloSettings, round_num: int,
          cluster: int, epsilon: float, lam: float) -> collections.OrderedDict:
  """What a silo does in round `round_num` (1-based) of `algorithm`, with
  its pull `lam` (`silo_pulls`)."""
  switch = _switch_round(algorithm, settings)
  select = (settings.selection_share * epsilon
            if round_num <= settings.selection_rounds(algorithm) else 0.0)
  if switch is not None:  # shared training, then personal from its end
    reset = round_num <= switch + 1
    if round_num <= switch:
      lam = 0.0
  else:  # the shared model every round, or the personal one
    reset = algorithm.shared_model
  num_clusters = settings.num_clusters if algorithm.clustered else 1
  return cross_silo_process.make_role(settings.learning_rate, lam, reset,
                                      select, cluster, num_clusters)


def _deployed(algorithm: algorithms.Algorithm, settings: CrossSiloSettings,
              round_num: int) -> str:
  """Which model a silo would use after `round_num`: personal, global or its
  cluster's."""
  if algorithm.shared_model:
    return 'cluster'
  switch = _switch_round(algorithm, settings)
  if switch is not None and round_num <= switch:
    return 'cluster'
  return 'personal'


def test_weighted_metric(task: FederatedTask,
                         weights_of: dict[Hashable,
                                          tff.learning.models.ModelWeights]
                         ) -> float:
  """Silos' test metrics averaged with their test counts as weights; every
  silo scored with the model it deploys, all in one batched evaluation."""
  return _weighted(_silo_scores(task, weights_of))


def metric_by_epsilon(scored: dict[Hashable, tuple[float, int]],
                      silos: Sequence[Hashable],
                      epsilons: Sequence[float]) -> dict[str, float]:
  """The test-weighted metric over the silos of each epsilon (`scored` as
  `_silo_scores` gives it, `epsilons` in `silos`' order), keyed by the
  epsilon as `--epsilons` writes it: whether the strict silos gain as the
  mean does."""
  level = dict(zip(silos, epsilons))
  return {f'{e:g}': _weighted({c: v for c, v in scored.items()
                               if level[c] == e})
          for e in sorted(set(epsilons))
          if any(level[c] == e for c in scored)}


def _silo_scores(task, weights_of) -> dict[Hashable, tuple[float, int]]:
  """(test metric, test count) of each silo with test examples."""
  silos = [c for c in weights_of if len(task.test_arrays(c)[0])]
  scores = evaluation.own_model_scores(task, task.keras_model_fn(), {
      c: list(weights_of[c].trainable) + list(weights_of[c].non_trainable)
      for c in silos})
  return {c: (scores[c], len(task.test_arrays(c)[0])) for c in silos}


def _weighted(scored: dict[Hashable, tuple[float, int]]) -> float:
  values = np.array([v for v, _ in scored.values()], float)
  counts = np.array([n for _, n in scored.values()], float)
  return float(np.sum(values * counts) / np.sum(counts))


def build_process(task: FederatedTask, algorithm: algorithms.Algorithm,
                  settings: CrossSiloSettings
                  ) -> tff.templates.IterativeProcess:
  loss = task.loss_fn()
  loss.reduction = tf.keras.losses.Reduction.NONE
  return Execution(settings.cohort_size).build_cross_silo(
      task.tff_model_fn(), loss,
      task.metric_record.per_example_error if algorithm.clustered else None,
      settings.clip_norm,
      num_clusters=settings.num_clusters if algorithm.clustered else 1,
      personal_epoch=algorithm.personal_epoch, seed=settings.seed,
      regularizer_placement=settings.regularizer_placement,
      canaries=silo_canaries(task, settings))


def silo_canaries(task: FederatedTask, settings: CrossSiloSettings
                  ) -> canaries_lib.ExampleCanaries | None:
  """An audit run's canary examples, `settings.canaries` per silo."""
  if not settings.canaries:
    return None
  return canaries_lib.ExampleCanaries.create(
      canary_audit.directions_seed(settings.seed),
      task.num_trainable_parameters, settings.canaries, len(task.client_ids))


def privacy_warnings(settings: CrossSiloSettings) -> list[str]:
  """The lines a run with these settings announces (`release_policy`; an
  audit run's canaries too)."""
  return release_policy.privacy_warnings(
      seeded=settings.unsafe_seeded_dp_randomness,
      large_delta=settings.allow_large_delta) + canary_audit.example_notice(
          settings.canaries, 'silo')


def configuration_name(algorithm: algorithms.Algorithm, settings: CrossSiloSettings) -> str:
  name = f'{algorithm.name}_lr{settings.learning_rate:g}'
  if algorithm.regularized and settings.noise_aware_lambdas:
    name += f'_lambda_noise_h{settings.heterogeneity:g}'
  elif algorithm.regularized and settings.epsilon_lambdas is not None:
    name += '_lambda' + '_'.join(f'eps{e:g}-{lam:g}'
                                 for e, lam in settings.epsilon_lambdas)
  elif algorithm.regularized:
    name += f'_lambda{settings.regularization:g}'
  return name


def _settings_record(settings: CrossSiloSettings) -> dict:
  """The settings as summary.json holds them (without epsilon_lambdas
  and the noise-aware lambdas' settings when not asked for, as before they
  existed)."""
  out = dataclasses.asdict(settings)
  if settings.epsilon_lambdas is None:
    out.pop('epsilon_lambdas')
  if not settings.noise_aware_lambdas:
    out.pop('noise_aware_lambdas')
    out.pop('heterogeneity')
  return out


def run_key(task: FederatedTask, algorithm: algorithms.Algorithm,
             settings: CrossSiloSettings) -> dict:
  """What makes two runs the same run (a checkpoint is only reused then):
  everything but how often it is saved."""
  key = _settings_record(settings)
  key.pop('checkpoint_every')
  for optional in ('cohort_size', 'canaries', 'pld_discretization'):
    if not key[optional]:
      key.pop(optional)  # keeps checkpoints of earlier versions valid
  if key['accountant'] == 'rdp':
    key.pop('accountant')  # as before the setting had a choice
  key.update(task=task.name, method=algorithm.name,
             batch_size=task.batch_size, data=task.data_digest,
             loss=task.loss_fn().name, conventions=DP_SGD_CONVENTIONS)
  return runtime.with_worker_count(key)


def algorithm_record(name: str) -> algorithms.Algorithm:
  """The record of cross-silo algorithm `name` (`algorithms.record`)."""
  return algorithms.record(name, algorithms.CROSS_SILO)


class CrossSiloRounds(round_loop.RoundProgram):
  """A cross-silo algorithm's rounds for `round_loop.run_rounds`: every silo,
  every round, with its personal model and cluster kept between rounds (and
  in the checkpoint).

  Each silo's spend is accounted once, for the summary: with 100+ silos a
  per-round column would cost more than the round.
  """

  def __init__(self, task: FederatedTask, algorithm: algorithms.Algorithm,
               settings: CrossSiloSettings,
               process: tff.templates.IterativeProcess,
               plans: list[ClientPrivacy], silo_seeds, label: str):
    self.label = label
    self.pulls = silo_pulls(task, algorithm, settings, plans)
    self.rounds = settings.rounds
    self._task, self._algorithm, self._settings = task, algorithm, settings
    self._process, self._plans, self._seeds = process, plans, silo_seeds
    self._execution = Execution(settings.cohort_size)
    self.state = process.initialize()
    self._initial = cross_silo_process.cluster_weights(self.state, 0)
    self.personal = ditto.PersonalModels()
    self.clusters = np.zeros(len(task.client_ids), np.int32)
    self.scores: dict[Hashable, tuple[float, int]] = {}
    self._epsilons = settings.silo_epsilons(len(task.client_ids))
    self._weights = [float(p.num_examples) if settings.weighted else 1.0
                     for p in plans]
    self.columns = ['round', 'metric', 'num_non_finite_updates'] + (
        [f'cluster_{g}_silos' for g in range(settings.num_clusters)]
        if algorithm.clustered else [])

  def _saved(self):
    return collections.OrderedDict(process=self.state, clusters=self.clusters)

  def restore(self, checkpoint: checkpointing.RunCheckpoint) -> int:
    restored, done, personal = checkpoint.restore(self._saved(),
                                                  self._task.client_ids)
    if restored is not None:
      self.state = restored['process']
      self.clusters = np.asarray(restored['clusters'])
      self.personal = personal
    return done

  def save(self, checkpoint: checkpointing.RunCheckpoint,
           round_num: int) -> None:
    checkpoint.save(self._saved(), round_num, self.personal)

  def train(self, round_num: int) -> dict:
    silos, settings = self._task.client_ids, self._settings
    roles = [_role(self._algorithm, settings, round_num, int(self.clusters[i]),
                   self._epsilons[i], self.pulls[i])
             for i in range(len(silos))]
    self.state, personal, clusters, measurements = self._execution.silo_round(
        self._process, self.state,
        [self.personal.get(c, self._initial.trainable) for c in silos],
        self._task, selection.every_client_order_seed(settings.seed, round_num),
        self._plans, self._weights, self._seeds, roles,
        indexed=settings.canaries > 0)
    self.personal.update(silos, personal)
    self.clusters = np.array(clusters, np.int32)
    row = {'num_non_finite_updates': int(
        measurements['num_non_finite_updates'])}
    if self._algorithm.clustered:
      for g in range(settings.num_clusters):
        row[f'cluster_{g}_silos'] = int(np.sum(self.clusters == g))
    return row

  def evaluate(self, round_num: int) -> dict:
    # Kept: the last round's scores also give each epsilon's metric.
    self.scores = _silo_scores(self._task, self.deployed(round_num))
    return {'metric': _weighted(self.scores)}

  def deployed(self, round_num: int
               ) -> dict[Hashable, tff.learning.models.ModelWeights]:
    """The model each silo would deploy after `round_num` rounds."""
    return deployed_weights(self._task, self._algorithm, self._settings,
                            round_num, self.state, self.personal,
                            self.clusters)

  def postfix(self, metrics: dict) -> dict[str, str]:
    return {'metric': f"{metrics['metric']:.4g}"}

  def weights(self) -> tff.learning.models.ModelWeights:
    return cross_silo_process.cluster_weights(self.state, 0)


def run_algorithm(task: FederatedTask, algorithm_name: str,
                  settings: CrossSiloSettings, output_dir: str | None,
                  progress: bool = True,
                  process: tff.templates.IterativeProcess | None = None
                  ) -> dict:
  """Trains `algorithm_name` on `task` into `<output_dir>/<configuration>`
  (`run_lifecycle`); returns (and writes) its summary.

  `process` is `build_process(task, algorithm, settings)` built earlier; it
  depends only on the algorithm, clip norm, clusters and seed, so a sweep over
  lambda and learning rates builds it once.
  """
  algorithm = algorithm_record(algorithm_name)
  plans = plan_silos(task, algorithm, settings, progress,
                     os.path.join(output_dir, CALIBRATIONS_FILE)
                     if output_dir else None)
  silos = task.client_ids
  if process is None:
    process = build_process(task, algorithm, settings)
  name = configuration_name(algorithm, settings)
  noise_aware = settings.noise_aware_lambdas and algorithm.regularized

  def build(claimed: run_lifecycle.ClaimedRun) -> CrossSiloRounds:
    # Each silo's DP-SGD noise, example sampling and private selections
    # follow its own seed, derived from the run's secret (kept in the
    # checkpoint).
    program = CrossSiloRounds(task, algorithm, settings, process, plans,
                              claimed.client_seeds(len(silos)),
                              label=f'{name} rounds')
    if noise_aware and progress:
      print(_lambdas_line(name, settings, program.pulls))
    return program

  def summarize(program: CrossSiloRounds, result) -> dict:
    spent = [p.epsilon_after(settings.rounds) for p in plans]
    return {
        'configuration': name,
        'method': algorithm.name,
        'task': task.name,
        'metric_name': task.metric,
        'metric': result.final_metrics['metric'],
        'settings': _settings_record(settings),
        'privacy_warnings': privacy_warnings(settings),
        'silos': [{
            'silo': str(c),
            'examples': p.num_examples,
            'target_epsilon': p.epsilon,
            'delta': p.delta,
            'noise_multiplier': p.noise_multiplier,
            'sampling_rate': p.sampling_rate,
            'epochs_per_round': p.epochs_per_round,
            'selection_epsilon': p.selection_epsilon,
            'selection_rounds': p.selection_rounds,
            'epsilon_spent': e,
            **({'lambda': lam} if noise_aware else {}),
            **({'pld_discretization': p.accountant.discretization,
                'epsilon_spent_rdp': p.rdp_epsilon_after(settings.rounds)}
               if p.accountant.name == 'pld' else {}),
        } for c, p, e, lam in zip(silos, plans, spent, program.pulls)],
        **_level_metrics(task, settings, program),
        'epsilon_spent_max': max(spent),
        'epsilon_spent_min': min(spent),
        **accountant_summary(plans, settings.rounds),
        # A silo sends one epoch's update a round (Ditto's personal epoch
        # stays with it).
        **(canary_audit.client_audit_summary(
            settings.canaries, dp_sgd.canary_scores(
                program.state[cross_silo_process.CANARIES_KEY]), plans,
            spent, [p.steps_per_epoch * settings.rounds for p in plans],
            settings.delta, task.num_trainable_parameters)
           if settings.canaries else {}),
        'final_clusters': ([int(g) for g in program.clusters]
                           if algorithm.clustered else None),
    }

  summary, _ = run_lifecycle.run(
      os.path.join(output_dir, name) if output_dir else None,
      run_key(task, algorithm, settings), settings, build, summarize,
      progress=progress)
  return summary


def _lambdas_line(name: str, settings: CrossSiloSettings,
                  pulls: list[float]) -> str:
  """The noise-aware lambdas, printed before training: per silo epsilon
  their median and range over its silos."""
  epsilons = settings.silo_epsilons(len(pulls))
  parts = []
  for eps in sorted(set(epsilons)):
    at = [lam for e, lam in zip(epsilons, pulls) if e == eps]
    parts.append(f'eps {eps:g}: {np.median(at):.4g} ({min(at):.4g} - '
                 f'{max(at):.4g}, {len(at)} silos)')
  most = 1.0 / settings.learning_rate
  capped = sum(lam >= most for lam in pulls)
  return (f'{name}: silo lambdas from the noise (heterogeneity '
          f'{settings.heterogeneity:g}): ' + ', '.join(parts) + (
              f'; {capped} at 1 / learning rate = {most:g}, where one step '
              'lands on the global model (their closed form\'s is larger or '
              'inf)' if capped else ''))


def deployed_weights(task: FederatedTask, algorithm: algorithms.Algorithm,
                     settings: CrossSiloSettings, round_num: int, state,
                     personal: ditto.PersonalModels, clusters: np.ndarray
                     ) -> dict[Hashable, tff.learning.models.ModelWeights]:
  """The model each silo would deploy after `round_num` rounds."""
  kind = _deployed(algorithm, settings, round_num)
  num_clusters = settings.num_clusters if algorithm.clustered else 1
  cluster_models = [cross_silo_process.cluster_weights(state, g)
                    for g in range(num_clusters)]
  weights_of = {}
  for i, c in enumerate(task.client_ids):
    shared = cluster_models[int(clusters[i]) if algorithm.clustered else 0]
    if kind == 'personal':
      weights_of[c] = tff.learning.models.ModelWeights(
          personal.get(c, shared.trainable), shared.non_trainable)
    else:
      weights_of[c] = shared
  return weights_of


def sweep(task: FederatedTask, algorithm_name: str, settings: CrossSiloSettings,
          lambdas, learning_rates, output_dir: str | None,
          progress: bool = True) -> dict:
  """Runs `method_name` over the lambda x learning-rate grid.

  Returns the best setting (and its run's summary), per lambda the best
  metric over learning rates (the curve the MR-MTL paper plots against
  lambda) and the range of the silos' epsilon spent over all runs; writes
  every run's metric to
  `sweep_<algorithm>.csv`. Algorithms without lambda sweep the learning rates only.
  """
  algorithm = algorithm_record(algorithm_name)
  if not algorithm.regularized:
    lambdas = [0.0]
  elif settings.epsilon_lambdas is not None or settings.noise_aware_lambdas:
    # each silo its epsilon's, or the closed form's
    lambdas = [settings.regularization]
  else:
    lambdas = list(lambdas)
  process = build_process(task, algorithm, settings)
  results, spent, summaries = [], [], []
  grid = [(lam, lr) for lam in lambdas for lr in learning_rates]
  for lam, lr in tqdm.tqdm(grid, desc=f'{algorithm_name} settings',
                           disable=not progress or len(grid) == 1):
    s = dataclasses.replace(settings, regularization=lam, learning_rate=lr)
    summary = run_algorithm(task, algorithm_name, s, output_dir, progress=progress,
                         process=process)
    results.append((lam, lr, summary['metric']))
    summaries.append(summary)
    spent += [summary['epsilon_spent_min'], summary['epsilon_spent_max']]
  best, best_summary = results[0], summaries[0]
  for res, summary in zip(results[1:], summaries[1:]):
    if task.metric_record.better(res[2], best[2]):
      best, best_summary = res, summary
  curve = {}
  for lam, lr, m in results:
    if lam not in curve or task.metric_record.better(m, curve[lam][1]):
      curve[lam] = (lr, m)
  if output_dir:
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, f'sweep_{algorithm_name}.csv'), 'w',
              newline='') as f:
      out = csv.writer(f)
      out.writerow(['method', 'lambda', 'learning_rate', task.metric])
      for lam, lr, m in results:
        out.writerow([algorithm_name, f'{lam:g}', f'{lr:g}', f'{m:.6g}'])
  return {
      'method': algorithm_name,
      'best_lambda': best[0] if algorithm.regularized else None,
      'best_learning_rate': best[1],
      'best_metric': best[2],
      'best_summary': best_summary,
      'curve': [(lam, lr, m) for lam, (lr, m) in curve.items()],
      'runs': results,
      'summaries': summaries,
      'epsilon_spent': (min(spent), max(spent)),
  }

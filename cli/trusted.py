"""The trusted-server setting (FedHDP and its baselines) from the command
line; reproduce.py builds its configurations with `learning_setup` too."""

from __future__ import annotations

import functools
import math
import os

from tff_hdp.cli import flags


def learning_setup(task):
  """(settings, client choices, configurations) the flags ask for on `task`.

  reproduce.py sets the flags from a preset and calls this too, so both entry
  points train a configuration alike.
  """
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy.plans import ClipSettings  # pylint: disable=g-import-not-at-top
  n = len(task.client_ids)
  flags.check(flags.CLIENTS_PER_ROUND.value <= n,
         f'--clients_per_round={flags.CLIENTS_PER_ROUND.value} exceeds the '
         f'{n} clients of task {task.name!r}.')
  sampling = flags.client_sampling(n)
  levels = flags.private_levels()
  ditto = _ditto_settings(levels) if flags.ditto_on() else None
  fractions = (flags.floats(flags.LEVEL_FRACTIONS) if flags.LEVEL_FRACTIONS.value else None)
  count_stddev = flags.CLIP_COUNT_STDDEV.value
  if flags.CLIP_LR.value > 0:
    count_stddev = clip_count_stddev(levels, sampling, n)
  settings = trusted_setting.Settings(
      rounds=flags.ROUNDS.value,
      sampling=sampling,
      local_epochs=flags.LOCAL_EPOCHS.value,
      client_lr=flags.CLIENT_LR.value,
      server_lr=flags.SERVER_LR.value,
      clip=ClipSettings(
          initial_norm=flags.CLIP_NORM.value,
          target_quantile=flags.TARGET_QUANTILE.value,
          learning_rate=flags.CLIP_LR.value,
          count_stddev=count_stddev),
      denominator=flags.DENOMINATOR.value,
      server_momentum=flags.SERVER_MOMENTUM.value,
      seed=flags.SEED.value,
      eval_every=flags.EVAL_EVERY.value,
      checkpoint_every=flags.CHECKPOINT_EVERY.value,
      ditto=ditto,
      cohort_size=_cohort_size(task),
      simulate_dropout=flags.SIMULATE_DROPOUT.value,
      canaries=flags.CANARIES.value,
      release_unprotected_stats=flags.RELEASE_UNPROTECTED.value,
      unsafe_seeded_dp_randomness=flags.UNSAFE_SEEDED.value,
      allow_large_delta=flags.UNSAFE_LARGE_DELTA.value,
      options=flags.option_values(flags.TRUSTED),
      group_labels=_group_labels(levels))
  own = _own_levels(task)
  if own is not None:
    flag, levels_of = own
    from tff_hdp.privacy import privacy_groups  # pylint: disable=g-import-not-at-top
    try:
      choices = privacy_groups.assign_from_levels(task.client_ids, levels,
                                                  levels_of())
    except ValueError as e:
      raise flags.InputError(f'--{flag.name}={flag.value}: {e}') from None
  else:
    try:
      choices = trusted_setting.client_choices(
          task, levels, flags.OPT_OUT.value, flags.SEED.value, fractions)
    except ValueError as e:
      raise flags.InputError(
          f'--opt_out_fraction/--level_fractions: {e}') from None
  configs = trusted_setting.configurations(
      flags.ALGORITHMS.value, flags.swept_values(flags.TRUSTED))
  if 'fedhdp' in flags.ALGORITHMS.value:
    _check_levels_have_clients(choices, n)
    _check_levels_are_sampled(choices, sampling.rate, n)
  flags.check_group_weights([size > 0 for size in choices.group_sizes()])
  return settings, choices, configs


def _opt_out_share(choices) -> float:
  """The share of clients that opted out, as assigned (at random by
  --opt_out_fraction, or each client's own level)."""
  sizes = choices.group_sizes()
  return sum(n for g, n in zip(choices.groups, sizes)
             if not g.is_private) / sizes.sum()


def _own_levels_flag():
  """The flag that gives each client its own level, or None (levels drawn
  at random)."""
  for flag in (flags.PRIVACY_LEVELS_FILE, flags.LEVELS_BY_LABEL):
    if flag.value is not None:
      return flag
  return None


def _own_levels(task):
  """(flag, a function giving {client id: level}) where a flag gives each
  client its own level, else None."""
  from tff_hdp.privacy import privacy_groups  # pylint: disable=g-import-not-at-top
  own = _own_levels_flag()
  if own is flags.PRIVACY_LEVELS_FILE:
    return own, flags.levels_file
  if own is None:
    return None
  flags.check(task.metric == 'accuracy', f'--levels_by_label: task '
              f'{task.name!r} has no class labels (its metric is '
              f'{task.metric}).')
  return flags.LEVELS_BY_LABEL, lambda: privacy_groups.levels_by_label(
      {c: task.train_arrays(c)[1] for c in task.client_ids},
      flags.label_bands())


def _group_labels(levels):
  """Each group's public labels where --levels_by_label gives them (its
  bands), else None: the levels of a file or of --opt_out_fraction say
  nothing public of a group's labels, so no group is scored apart."""
  if flags.LEVELS_BY_LABEL.value is None:
    return None
  from tff_hdp.privacy import privacy_groups  # pylint: disable=g-import-not-at-top
  return privacy_groups.band_labels(levels, flags.label_bands())


def _check_levels_have_clients(choices, n: int) -> None:
  """Every private level FedHDP trains holds a client once the fractions
  are rounded to whole clients on this task."""
  sizes = choices.group_sizes()
  for group, size in zip(choices.groups, sizes):
    flags.check(size > 0 or not group.is_private,
                f'--opt_out_fraction={flags.OPT_OUT.value:g} and '
                '--level_fractions leave privacy level '
                f'{group.name!r} without clients (of {n}); lower the '
                'opt-out fraction or raise that level\'s fraction.')


def _check_levels_are_sampled(choices, rate: float, n: int) -> None:
  """Every private level FedHDP trains expects a client a round or more at
  the run's sampling rate: below that its noisy mean, divided by its
  expected count, averages no client in most rounds."""
  own = _own_levels_flag()
  source = (f'--{own.name}={own.value}' if own is not None else
            '--opt_out_fraction and --level_fractions')
  for group, size in zip(choices.groups, choices.group_sizes()):
    flags.check(
        not group.is_private or rate * size >= 1 - 1e-9,
        f'{source}: privacy level {group.name!r} holds {size} of the {n} '
        f'clients, {rate * size:.2g} expected a round at '
        f'--clients_per_round={flags.CLIENTS_PER_ROUND.value}: fewer than '
        f'one, so its mean averages no client in most rounds; give it '
        f'{math.ceil(1 / rate - 1e-9)} clients or more, or raise '
        '--clients_per_round.')


def _ditto_settings(levels):
  """Ditto's lambdas from the flags: one for every private level (the other
  of --ditto_lambda_p / --ditto_lambda_np by default), each level its own
  (--ditto_level_lambdas), or each group the closed form's
  (--ditto_noise_aware_lambdas)."""
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  lam_p, lam_np = flags.DITTO_LAMBDA_P.value, flags.DITTO_LAMBDA_NP.value
  rate = flags.DITTO_LR.value or flags.CLIENT_LR.value
  if flags.DITTO_NOISE_AWARE.value:
    spread = flags.option_values(flags.TRUSTED).get('heterogeneity')
    return trusted_setting.DittoSettings(
        None, None, rate, noise_aware=True,
        local_share=flags.DITTO_LOCAL_SHARE.value,
        heterogeneity=1.0 if spread is None else spread)
  if flags.DITTO_LEVEL_LAMBDAS.value is not None:
    return trusted_setting.DittoSettings(
        None, lam_np, rate, dict(zip(
            (g.name for g in levels),
            flags.floats(flags.DITTO_LEVEL_LAMBDAS))))
  return trusted_setting.DittoSettings(
      lam_np if lam_p is None else lam_p,
      lam_p if lam_np is None else lam_np, rate)


def clip_count_stddev(levels, sampling, n) -> float | None:
  """z_b for the settings: --clip_count_stddev, or
  `plans.default_clip_count_stddev` (None where that is TFF's 5%, the
  plan's own default). A value given equal to the default is the default,
  so the run's key, and its checkpoints, are the same either way."""
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  given = flags.CLIP_COUNT_STDDEV.value
  try:
    value, derived = plans.default_clip_count_stddev(
        levels, sampling, flags.ROUNDS.value, n)
  except accounting.InfeasiblePrivacyTargetError as e:
    if given is not None:
      return given  # the plan says why the target fails at the value given
    raise flags.InputError(f'--epsilons/--deltas: {e}') from None
  default = value if derived else None
  if given is not None:
    return default if math.isclose(given, value, rel_tol=1e-9) else given
  if not derived:
    return None
  _say_once(f'--clip_count_stddev not given: using {value:.4g}, the noise '
        'multiplier the strictest level needs over '
        f'{flags.ROUNDS.value} rounds (5% of the '
        f'{sampling.rate * n:g} expected clients per round, '
        f'{plans.tff_clip_count_stddev(sampling, n):.3g}, is too little '
        'noise on the clip count for the target).')
  return value


def _cohort_size(task) -> int:
  """--cohort_size, lowered (and said so) when that many of the task's
  models would not fit a cohort's memory (`execution.fit_cohort_size`)."""
  from tff_hdp.learning import execution  # pylint: disable=g-import-not-at-top
  requested = flags.COHORT_SIZE.value
  if requested <= 1:
    return requested
  parameters = task.keras_model_fn().count_params()
  fitted = execution.fit_cohort_size(requested, parameters)
  if fitted < requested:
    _say_once(f'--cohort_size={requested} lowered to {fitted}: a cohort holds '
              f'about 10 copies of the {task.name} model ({parameters:,} '
              'parameters) per client, kept under '
              f'{execution.COHORT_BYTES / 2**30:g} GiB.')
  return fitted


@functools.lru_cache(maxsize=None)
def _say_once(line: str) -> None:
  """Prints `line` the first time only (reproduce.py sets up every Ditto
  block alike)."""
  print(line)


def start_command() -> None:
  """Forgets what an earlier command in this process said: each command
  says its own lines once (a script or test may run several)."""
  _say_once.cache_clear()


def _release_managers(name: str) -> list:
  """TensorBoard events of configuration `name`'s rounds (--tensorboard)."""
  if not flags.TENSORBOARD.value:
    return []
  from tff_hdp.simulation import run_files  # pylint: disable=g-import-not-at-top
  return [run_files.TensorBoardRounds(
      os.path.join(flags.OUTPUT_DIR.value, name, 'tensorboard'))]


def run() -> None:
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  start_command()
  task = flags.load_task()
  n = len(task.client_ids)
  settings, choices, configs = learning_setup(task)
  warnings = trusted_setting.privacy_warnings(settings)
  for line in warnings:
    print(line)
  try:
    summaries = []
    for config in configs:
      summary, _ = trusted_setting.run_configuration(
          task, config, choices, settings, flags.OUTPUT_DIR.value,
          release_managers=_release_managers(config.name))
      summaries.append(summary)
  except trusted_setting.RUN_ERRORS as e:
    raise flags.InputError(str(e)) from None
  if flags.PLOTS.value:
    from tff_hdp.reporting import plots  # pylint: disable=g-import-not-at-top
    plots.sweep_plots({c.name: os.path.join(flags.OUTPUT_DIR.value, c.name)
                       for c in configs},
                      os.path.join(flags.OUTPUT_DIR.value, 'plots'),
                      title=task.name)
  header, rows = tables.results_table(summaries)
  scored = len(task.evaluation_clients(task.client_ids))
  heading = (
      f'{task.name}: {n} clients, {flags.ROUNDS.value} rounds, '
      f'{flags.CLIENTS_PER_ROUND.value} clients per round ({flags.SAMPLING.value}), '
      f'{_opt_out_share(choices):.0%} opt out' + (
          f', {task.dropped_clients} clients without examples dropped'
          if task.dropped_clients else '') + (
          f', per-client metrics on a seeded subset of {scored} clients'
          if scored < n else ''))
  caption = '\n'.join(warnings + tables.table_notes(
      settings.release_unprotected_stats, task.metric,
      audited=settings.canaries > 0, summary=summaries[-1]))
  tables.print_and_write_table(
      flags.OUTPUT_DIR.value, header, rows, caption=caption,
      records=tables.results_records(summaries),
      alarms=[line for s in summaries for line in tables.audit_alarms(s)],
      heading=heading)
  also = [what for what, on in (('TensorBoard events', flags.TENSORBOARD),
                                ('plots', flags.PLOTS)) if on.value]
  print(f'\nPer-round metrics, summaries{"".join(", " + a for a in also)}: '
        f'{flags.OUTPUT_DIR.value}/')

"""The untrusted-server setting from the command line: one run per
aggregation rule, and the comparison table; and reproduce.py's figure
presets (`run_figure`), one such run per privacy distribution and rule."""

from __future__ import annotations

import dataclasses
import os
import time

from tff_hdp.cli import flags
from tff_hdp.cli import sweep_runs


# With Robust-HDP's own epsilon lists (--epsilon_distribution=distK), its
# authors' clip norm and delta, unless the flags say otherwise.
ROBUST_HDP_CLIP, ROBUST_HDP_DELTA = 3.0, 1e-4


def _robust_hdp_defaults() -> tuple[float, float, str | None]:
  """(clip norm, delta, the line that says so, or None) of the flags."""
  clip, delta = flags.DP_SGD_CLIP.value, flags.floats(flags.DELTAS)[0]
  if not flags.EPSILON_DISTRIBUTION.value.startswith('dist'):
    return clip, delta, None
  taken = []
  if not flags.DP_SGD_CLIP.present:
    clip = ROBUST_HDP_CLIP
    taken.append(f'c = {clip:g}')
  if not flags.DELTAS.present:
    delta = ROBUST_HDP_DELTA
    taken.append(f'delta = {delta:g}')
  line = (f'--epsilon_distribution={flags.EPSILON_DISTRIBUTION.value}: the '
          f'Robust-HDP authors\' {" and ".join(taken)} (give --dp_sgd_clip '
          'or --deltas to change them).') if taken else None
  return clip, delta, line


def learning_setup():
  """The `UntrustedSettings` of the command line's flags."""
  from tff_hdp.simulation import untrusted_setting  # pylint: disable=g-import-not-at-top
  clip, delta, _ = _robust_hdp_defaults()
  return untrusted_setting.UntrustedSettings(
      rounds=flags.ROUNDS.value,
      epsilon_distribution=flags.EPSILON_DISTRIBUTION.value,
      delta=delta,
      learning_rate=flags.CLIENT_LR.value,
      clip_norm=clip,
      seed=flags.SEED.value,
      eval_every=flags.EVAL_EVERY.value,
      checkpoint_every=flags.CHECKPOINT_EVERY.value,

      release_unprotected_stats=flags.RELEASE_UNPROTECTED.value,
      unsafe_seeded_dp_randomness=flags.UNSAFE_SEEDED.value,
      allow_large_delta=flags.UNSAFE_LARGE_DELTA.value,
      canaries=flags.CANARIES.value,
      options=flags.option_values(flags.UNTRUSTED),
      **flags.dp_sgd_accounting())


def run() -> None:
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import untrusted_setting  # pylint: disable=g-import-not-at-top
  task = flags.load_task()
  settings = learning_setup()
  defaults = _robust_hdp_defaults()[2]
  if defaults:
    print(defaults)
  warnings = untrusted_setting.privacy_warnings(settings)
  for line in warnings:
    print(line)
  name = f'{tables.metric_prefix(task.metric)}_g'
  audited = settings.canaries > 0
  rows, records, alarms = [], [], []
  try:
    for algorithm in flags.ALGORITHMS.value:
      s = untrusted_setting.run_algorithm(task, algorithm, settings,
                                        flags.OUTPUT_DIR.value)
      alarms += tables.audit_alarms(s)
      metric = s['metrics']['acc_g']
      rows.append([algorithm, tables.metric_cell(task.metric, metric),
                   f"{s['epsilon_spent_min']:.3g} - "
                   f"{s['epsilon_spent_max']:.3g}",
                   *([tables.client_empirical_cell(s)] if audited else []),
                   f"{s['seconds']:.0f}"])
      records.append({'algorithm': algorithm, name.lower(): metric,
                      'epsilon_spent_min': s['epsilon_spent_min'],
                      'epsilon_spent_max': s['epsilon_spent_max'],
                      **(tables.client_empirical_record(s)
                         if audited else {}),
                      'seconds': s['seconds']})
      if audited and flags.OUTPUT_DIR.value:
        tables.write_client_empirical_table(
            os.path.join(flags.OUTPUT_DIR.value, algorithm), s,
            task.client_ids)
  except trusted_setting.RUN_ERRORS as e:
    raise flags.InputError(str(e)) from None
  header = ['Aggregation', name, 'eps spent per client (min - max)',
            *([tables.CLIENT_EMPIRICAL_HEADER] if audited else []),
            'seconds']
  tables.print_and_write_client_table(
      flags.OUTPUT_DIR.value, header, rows, records, audited, alarms,
      heading=f'{task.name}: {len(task.client_ids)} clients, all in every '
      f'round, {flags.ROUNDS.value} rounds, eps ~ '
      f'{flags.EPSILON_DISTRIBUTION.value}', summary=s)
  print(f'\nPer-round metrics and summaries: {flags.OUTPUT_DIR.value}/')


def _finished_or_run(task, algorithm, settings, output_dir):
  """The run's summary (`sweep_runs.finished_or_run`); None if another
  process holds it."""
  from tff_hdp.simulation import untrusted_setting  # pylint: disable=g-import-not-at-top
  return sweep_runs.finished_or_run(
      f'{output_dir}/{algorithm}',
      lambda: untrusted_setting.completed_summary(task, algorithm, settings,
                                                  output_dir),
      lambda: untrusted_setting.run_algorithm(task, algorithm, settings,
                                              output_dir))


# How often a figure checks on the selection runs other processes hold.
SELECTION_POLL_SECONDS = 30.0


def _wait_for_holders() -> None:
  """One poll interval (a function of its own, so tests can stand in)."""
  time.sleep(SELECTION_POLL_SECONDS)


def _selection_accs(task, rules, learning_rates, settings,
                    figure_dir) -> dict[tuple[str, float], float]:
  """Acc_g of each (rule, learning rate) selection run. Every distribution's
  runs need the choice, so after training the free runs this waits for the
  ones other processes hold: invocations of one command share the
  selection."""
  import tqdm  # pylint: disable=g-import-not-at-top
  pending, accs = [(rule, lr) for rule in rules for lr in learning_rates], {}
  while pending:
    held = []
    for rule, lr in pending:
      summary = _finished_or_run(
          task, rule, dataclasses.replace(settings, learning_rate=lr),
          os.path.join(figure_dir, 'lr_selection', f'lr{lr:g}'))
      if summary is None:
        held.append((rule, lr))
      else:
        accs[rule, lr] = summary['metrics']['acc_g']
    if held:
      tqdm.tqdm.write(
          f'Waiting for {len(held)} learning-rate selection run(s) other '
          f'processes hold; checking every {SELECTION_POLL_SECONDS:g} s.')
      _wait_for_holders()
    pending = held
  return accs


def figure_run_dir(figure_dir: str, seed: int, dist: str, lr: float) -> str:
  """Where a figure keeps its runs of one seed, distribution and learning
  rate (one folder per rule inside): every setting a sitting may change is
  in the path, so a changed choice starts new runs beside the old ones
  instead of stopping at their run key."""
  return os.path.join(figure_dir, f'seed{seed}', dist, f'lr{lr:g}')


def _figure_rates(figure, task, base, rules, figure_dir):
  """({rule: learning rate}, how they were chosen): --client_lr, else the
  figure's recorded choice, else a selection on its first distribution."""
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  if flags.CLIENT_LR.present:
    return ({rule: base.learning_rate for rule in rules},
            f'--client_lr={base.learning_rate:g} for every rule')
  if figure.chosen_learning_rates is not None:
    chosen = dict(figure.chosen_learning_rates)
    rates = {rule: chosen[rule] for rule in rules}
    return rates, ', '.join(f'{rule} {lr:g}' for rule, lr in rates.items()) + (
        ' (the recorded selection)')
  # The first rounds of the whole runs, at their noise: runs calibrated for
  # fewer rounds add less noise a round and favour larger rates.
  short = dataclasses.replace(
      base, epsilon_distribution=figure.distributions[0],
      train_rounds=min(figure.selection_rounds, base.rounds))
  all_accs = _selection_accs(task, rules, figure.learning_rates, short,
                             figure_dir)
  rates, scores = {}, []
  for rule in rules:
    accs = {lr: all_accs[rule, lr] for lr in figure.learning_rates}
    rates[rule] = max(accs, key=accs.get)
    scores.append([rule] + [f'{accs[lr]:.2f}' for lr in accs] +
                  [f'{rates[rule]:g}'])
  tables.write_table(
      figure_dir, ['rule'] + [f'lr {lr:g}' for lr in figure.learning_rates] +
      ['chosen'], scores, stem='lr_selection',
      caption=f'Acc_g after the first {short.train_rounds} of '
      f'{short.rounds} rounds (noise calibrated for {short.rounds}) on '
      f'{short.epsilon_distribution}, per learning rate.')
  return rates, ', '.join(f'{rule} {lr:g}' for rule, lr in rates.items())


def _figure_seeds(figure_dir: str, seed: int) -> list[int]:
  """The seeds with a folder in `figure_dir`, and `seed`, in order."""
  names = os.listdir(figure_dir) if os.path.isdir(figure_dir) else []
  return sorted({seed} | {int(n[4:]) for n in names
                          if n.startswith('seed') and n[4:].isdigit()})


def _figure_records(figure, task, base, rules, rates, figure_dir, held):
  """One record per (distribution, seed) with a finished or held run:
  each rule's Acc_g (None where not finished), rate and seconds; `held`
  holds the (seed, distribution, rule) that other processes run. A run of
  this command's seed counts beside its run key; one of another seed
  (whose data split is not loaded) when its summary holds exactly these
  settings."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import checkpointing
  from tff_hdp.simulation import untrusted_setting
  # pylint: enable=g-import-not-at-top
  records = []
  for dist in sorted(figure.distributions,
                     key=lambda d: int(d.removeprefix('dist'))):
    for seed in _figure_seeds(figure_dir, base.seed):
      record = {'distribution': dist, 'seed': seed}
      for rule in rules:
        lr = rates[rule]
        settings = dataclasses.replace(
            base, seed=seed, epsilon_distribution=dist, learning_rate=lr)
        run_dir = figure_run_dir(figure_dir, seed, dist, lr)
        if seed == base.seed:
          summary = untrusted_setting.completed_summary(task, rule, settings,
                                                        run_dir)
        else:  # another seed's task (its split) is not loaded here
          summary = checkpointing.read_json_dict(
              os.path.join(run_dir, rule, 'summary.json'))
          if (summary.get('settings') != settings.as_dict() or
              (summary.get('metrics') or {}).get('acc_g') is None):
            summary = None
        record.update({
            f'acc_g_{rule}': summary and summary['metrics']['acc_g'],
            f'learning_rate_{rule}': lr,
            f'seconds_{rule}': summary and round(summary['seconds'])})
      if any(record[f'acc_g_{rule}'] is not None or (seed, dist, rule) in held
             for rule in rules):
        records.append(record)
  return records


def _figure_plots(figure_dir: str, runs: dict[str, str], dist: str,
                  seed: int, rules, records, title: str) -> None:
  """plots/accuracy_by_distribution.png (the figure so far, each rule's
  mean over the seeds that finished it) and plots/<dist>_accuracy_vs_rounds
  .png (the convergence of `runs`, {rule: run folder}, the finished
  ones; seed<s>_<dist>_... for seeds other than 0)."""
  from tff_hdp.reporting import plots  # pylint: disable=g-import-not-at-top
  out = os.path.join(figure_dir, 'plots')
  means = {}
  for r in records:
    for rule in rules:
      if r[f'acc_g_{rule}'] is not None:
        means.setdefault(r['distribution'], {}).setdefault(rule, []).append(
            r[f'acc_g_{rule}'])
  plots.accuracy_by_distribution(
      {d: {rule: sum(v) / len(v) for rule, v in accs.items()}
       for d, accs in means.items()},
      os.path.join(out, 'accuracy_by_distribution.png'), title=title)
  runs = {rule: d for rule, d in runs.items()
          if os.path.exists(os.path.join(d, 'rounds.csv'))}
  if runs:
    prefix = f'seed{seed}_' if seed else ''
    plots.accuracy_vs_rounds(
        runs, os.path.join(out, f'{prefix}{dist}_accuracy_vs_rounds.png'),
        title=f'{title}, {dist}, seed {seed}')


def run_figure(figure, figure_dir: str,
               distributions: list[str] | None = None) -> None:
  """Trains (or skips) the runs of `figure` (a `presets.FigurePreset`, its
  flags set) at the command's --seed: each rule at its learning rate
  (`_figure_rates`) on each of `distributions` (None: the figure's). The
  table of Acc_g, one row per distribution and seed found under
  `figure_dir`, is rewritten after each distribution, so an interrupted
  figure shows what is done."""
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  task = flags.load_task()
  base = learning_setup()
  rules = flags.ALGORITHMS.value
  rates, choice = _figure_rates(figure, task, base, rules, figure_dir)
  header = ['distribution', 'seed', *rules]
  held = set()
  for dist in distributions or figure.distributions:
    for rule in rules:
      run_dir = figure_run_dir(figure_dir, base.seed, dist, rates[rule])
      summary = _finished_or_run(
          task, rule, dataclasses.replace(base, epsilon_distribution=dist,
                                          learning_rate=rates[rule]), run_dir)
      if summary is None:
        held.add((base.seed, dist, rule))
    records = _figure_records(figure, task, base, rules, rates, figure_dir,
                              held)
    rows = [[r['distribution'], r['seed'], *(
        'running elsewhere' if (r['seed'], r['distribution'], rule) in held
        else '-' if r[f'acc_g_{rule}'] is None
        else f"{r[f'acc_g_{rule}']:.2f}" for rule in rules)]
            for r in records]
    caption = (f'{figure.title}: Acc_g (%) after {base.rounds} rounds, '
               f'{len(task.client_ids)} clients, c = {base.clip_norm:g}, '
               f'delta = {base.delta:g}, one row per seed; learning rates: '
               f'{choice}. Published: {figure.published}.')
    tables.write_table(figure_dir, header, rows, caption=caption,
                       records=records)
    _figure_plots(figure_dir, {rule: os.path.join(figure_run_dir(
        figure_dir, base.seed, dist, rates[rule]), rule) for rule in rules},
                  dist, base.seed, rules, records, figure.title)
  print(f'\n{caption}\n\n{tables.markdown_table(header, rows)}'
        f'\n\nTable and runs: {figure_dir}/')
  if held:
    print('\nRunning in other processes: ' + ', '.join(
        f'seed{s}/{d}/{rule}' for s, d, rule in sorted(held)) +
          '. Re-run this command after they finish for the whole table.')

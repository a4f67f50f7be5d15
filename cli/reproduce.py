"""Reproduces the FeO2 / FedHDP tables: named presets, resumable sweeps.

Examples:
  python reproduce.py --presets=mnist_noniid --data_dir=../shared/data/mnist
  python reproduce.py --presets=femnist --data_dir=DIR --rounds=100
      --num_clients=500 --ditto_lambdas=0.05 --output_dir=results/small
  python reproduce.py --presets=digits   # minutes: checks the whole pipeline
  python reproduce.py --presets=paper --dry_run   # what would run, and where
  python reproduce.py --presets=robust_hdp_fig2 --output_dir=results

A preset holds a published table's settings (SPEC.md §1, FeO2 Tables 3-7):
task, fraction of clients per round, rounds, (eps, delta), 5% opt-out, the
grid of r and of the Ditto lambda (lambda_p = lambda_np). It only sets
run_experiment.py's flags, and the configurations are built and trained by
the same code as there (`cli.trusted.learning_setup`,
`trusted_setting.run_configuration`): same seed, same opt-out clients for every
configuration. Any of those flags given on the command line wins over the
preset (e.g. --rounds, --num_clients, --clients_per_round, --r, --client_lr,
--data_dir); clients per round follow --num_clients at the preset's fraction.
The task is the preset's and the algorithms are the trusted server's
(another task or setting: run_experiment.py). Smaller runs shrink the
default clip-count noise (5% of the clients per round); where that is too
little for the target, the noise the target needs is used and printed.
Without --output_dir the files go to results/reproduce-<hash of the flags>,
printed at the start: another command never shares the folder, the same
command resumes in it.

Files, under <output_dir>/<preset>/:
  lambda<l>/<configuration>/  rounds.csv, summary.json, checkpoints/ and
                              tensorboard/ (TFF release manager event files)
  results.md, results.csv     the table in the papers' layout
  plots/<block>_*.png         accuracy and epsilon vs rounds, accuracy vs r
Re-running the same command skips configurations whose summary.json is
complete and resumes an interrupted one from its last checkpoint. Started
several times at once (on more cores, or machines sharing the folder), the
command shares the work: each invocation skips a configuration another live
one is running, and its table leaves that one out until a later re-run.

robust_hdp_fig2 is Robust-HDP's Figure 2 (untrusted server, SPEC.md §3):
Fashion-MNIST IID, 20 clients, Dist1-Dist9, robust_hdp, weiavg, pfa,
dpfedavg and min_epsilon, 200 rounds, c = 3, delta = 1e-4. Each rule's
learning rate is the one of 0.01, 0.03, 0.1, 0.3 that scores best after
the first 20 of the 200 rounds on Dist1, at the noise of 200 rounds
(--client_lr fixes one for all). That selection ran on 2026-11-26 and the
preset records its choice, so the command trains at those rates; a figure
without a recorded choice selects, invocations sharing the selection's
runs, each waiting at the end for the ones another holds. --seed picks the
seed and --distributions a part of the figure. Files, under
<output_dir>/robust_hdp_fig2/: seed<s>/dist<k>/lr<lr>/<rule>/ (rounds.csv,
summary.json, checkpoints/), results.md (Acc_g per distribution, seed and
rule) and results.csv (also each rule's learning rate and seconds) and
plots/ (accuracy_by_distribution.png, the figure so far, each rule's mean
over seeds, and dist<k>_accuracy_vs_rounds.png), rewritten after each
distribution. Finished runs
are skipped and interrupted ones resume, so the figure can be completed
over several sittings.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

from tff_hdp.cli import entry  # first: names a Python without the stack in one line

from absl import flags  # noqa: E402  pylint: disable=g-bad-import-order
from tff_hdp.cli import flags as cli_flags
from tff_hdp.cli import sweep_runs
from tff_hdp.cli import trusted as cli_trusted
from tff_hdp.cli import untrusted as cli_untrusted
from tff_hdp.cli.presets import FIGURES
from tff_hdp.cli.presets import PAPER_PRESETS
from tff_hdp.cli.presets import PRESETS

FLAGS = flags.FLAGS


# run_experiment.py flags a preset may set.
_MANAGED_FLAGS = sorted(
    {'clients_per_round', 'ditto_lambda_p', 'ditto_lambda_np'}.union(
        *(p.flag_values() for p in [*PRESETS.values(), *FIGURES.values()])))

_PRESETS = flags.DEFINE_list(
    'presets', None, 'Presets to run, in order: '
    f'{", ".join([*PRESETS, *FIGURES])}, or "paper" for '
    f'{", ".join(PAPER_PRESETS)}.')
_DITTO_LAMBDAS = flags.DEFINE_list(
    'ditto_lambdas', None, 'Ditto lambda blocks (lambda_p = lambda_np in '
    'each); default: the preset\'s; empty (--ditto_lambdas=): no '
    'personalization.')
_DISTRIBUTIONS = flags.DEFINE_list(
    'distributions', None, 'A figure preset\'s privacy distributions to '
    'train at --seed, in order (default: all of the figure\'s); its table '
    'lists every distribution and seed finished in the folder.')


def _preset_names() -> list[str]:
  names = []
  for name in _PRESETS.value or []:
    names += PAPER_PRESETS if name == 'paper' else [name]
  if not names:
    raise cli_flags.InputError(
        f'--presets is required: any of {", ".join([*PRESETS, *FIGURES])}, '
        'or "paper".')
  for name in names:
    if name not in PRESETS and name not in FIGURES:
      raise cli_flags.InputError(
          f'--presets: unknown preset {name!r}; choose from '
          f'{", ".join([*PRESETS, *FIGURES])} or "paper".')
  cli_flags.check_distinct('--presets', names, _PRESETS.value)
  return names


def _lambdas_flag() -> list[float] | None:
  """--ditto_lambdas as numbers (None: not given), checked before any work:
  each is a Ditto lambda (--ditto_lambda_p), which lands in float32."""
  if _DITTO_LAMBDAS.value is None:
    return None
  lambdas = cli_flags.floats(_DITTO_LAMBDAS, 0, cli_flags.MAX_FLOAT32,
                             allow_empty=True)
  cli_flags.check_distinct('--ditto_lambdas', lambdas, _DITTO_LAMBDAS.value)
  return lambdas


def _preset(name: str):
  return FIGURES[name] if name in FIGURES else PRESETS[name]


def _check_command(names: list[str]) -> None:
  """What a preset fixes: its task, and its setting's algorithms (trusted
  server; a figure's, untrusted server)."""
  if FLAGS['task'].present:
    raise cli_flags.InputError(
        '--task: reproduce.py runs each preset on its own task (' +
        ', '.join(f'{n}: {_preset(n).task}' for n in names) +
        '); drop --task, or run another task with run_experiment.py.')
  for name in names:
    if name in FIGURES and _DITTO_LAMBDAS.present:
      raise cli_flags.InputError(
          f'--ditto_lambdas does not apply to preset {name} (untrusted '
          'server, no Ditto); drop it.')
    if name not in FIGURES and _DISTRIBUTIONS.present:
      raise cli_flags.InputError(
          f'--distributions applies to figure presets '
          f'({", ".join(FIGURES)}), not {name}; drop it.')
    if name in FIGURES and _DISTRIBUTIONS.present:
      for dist in _DISTRIBUTIONS.value:
        if dist not in FIGURES[name].distributions:
          raise cli_flags.InputError(
              f'--distributions: preset {name} has no {dist!r}; choose from '
              f'{",".join(FIGURES[name].distributions)}.')
      cli_flags.check_distinct('--distributions', _DISTRIBUTIONS.value,
                               _DISTRIBUTIONS.value)
    if name in FIGURES and FLAGS['epsilon_distribution'].present:
      raise cli_flags.InputError(
          f'--epsilon_distribution: preset {name} runs each of '
          f'{",".join(FIGURES[name].distributions)}; drop it, or run one '
          'with run_experiment.py.')
    setting = cli_flags.UNTRUSTED if name in FIGURES else cli_flags.TRUSTED
    allowed = cli_flags.algorithms.names(setting)
    for algorithm in FLAGS.algorithms if FLAGS['algorithms'].present else []:
      if algorithm not in allowed:
        raise cli_flags.InputError(
            f'--algorithms: preset {name} runs {setting}-server algorithms '
            f'({", ".join(allowed)}), not {algorithm!r}; run other '
            'settings with run_experiment.py.')


@contextlib.contextmanager
def _flags_of_each_preset(names: list[str]):
  """Yields each preset's name with the flags set for it, checked: the
  command line's values, the preset's where the command line gives none.
  Restores the command line's values after."""
  start = {name: FLAGS[name].value for name in _MANAGED_FLAGS}

  def each():
    for name in names:
      for flag, value in start.items():
        FLAGS[flag].value = value
      _apply(_preset(name).flag_values())
      try:
        cli_flags.validate_flags()
      except cli_flags.InputError as e:
        raise cli_flags.InputError(f'{e} (preset {name})') from None
      yield name

  try:
    yield each()
  finally:
    for flag, value in start.items():
      FLAGS[flag].value = value


def _apply(values: dict[str, object]) -> None:
  """Sets flags from a preset, except those given on the command line."""
  for name, value in values.items():
    if not FLAGS[name].present:
      FLAGS[name].value = value


def _block_name(ditto) -> str:
  """Folder of one Ditto block, named by the lambdas it actually uses."""
  if ditto is None:
    return 'no_ditto'
  if ditto.lambda_p == ditto.lambda_np:
    return f'lambda{ditto.lambda_p:g}'
  return f'lambda_p{ditto.lambda_p:g}_np{ditto.lambda_np:g}'


def _run_or_skip(label, task, config, choices, settings, block_dir):
  """A configuration's summary (`sweep_runs.finished_or_run`); None if
  another process holds it."""
  from tff_hdp.simulation import run_files  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top

  def train():
    managers = []
    if cli_flags.TENSORBOARD.value:
      managers.append(run_files.TensorBoardRounds(
          os.path.join(block_dir, config.name, 'tensorboard')))
    return trusted_setting.run_configuration(
        task, config, choices, settings, block_dir,
        release_managers=managers)[0]

  return sweep_runs.finished_or_run(
      label, lambda: trusted_setting.completed_summary(
          task, config, choices, settings, block_dir), train)


def _run_preset(name: str, output_dir: str,
                lambdas: list[float] | None) -> None:
  """Trains (or skips) every configuration of preset `name`; writes outputs.

  `lambdas` are the Ditto blocks (None: the preset's; []: no Ditto).
  """
  import tqdm  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import plots  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import published  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  preset = PRESETS[name]
  task = cli_flags.load_task()
  n = len(task.client_ids)
  _apply({'clients_per_round': max(1, round(preset.fraction_per_round * n))})
  blocks = []
  if lambdas is None:
    lambdas = list(preset.ditto_lambdas)
  for lam in lambdas or [None]:
    _apply({'ditto_lambda_p': lam, 'ditto_lambda_np': lam})
    cli_flags.validate_flags()
    settings, choices, configs = cli_trusted.learning_setup(task)
    blocks.append((_block_name(settings.ditto), settings, choices, configs))
  preset_dir = os.path.join(output_dir, name)
  warnings = trusted_setting.privacy_warnings(blocks[0][1])
  for line in warnings:
    print(line)
  bar = tqdm.tqdm(total=sum(len(b[3]) for b in blocks),
                  desc=f'{name} configurations', unit='config',
                  dynamic_ncols=True)
  summaries, elsewhere = [], []
  for block, settings, choices, configs in blocks:
    block_dir = os.path.join(preset_dir, block)
    run_dirs = {}
    for config in configs:
      label = f'{name}/{block}/{config.name}'
      summary = _run_or_skip(label, task, config, choices, settings, block_dir)
      if summary is None:
        elsewhere.append(label)
      else:
        summaries.append(summary)
        run_dirs[config.name] = os.path.join(block_dir, config.name)
      bar.update()
    if cli_flags.PLOTS.value and run_dirs:
      plots.sweep_plots(run_dirs, os.path.join(preset_dir, 'plots'),
                        prefix=f'{block}_', title=f'{preset.title}, {block}')
  bar.close()
  published_acc_g = functools.partial(published.summary_acc_g, name)
  header, rows = tables.results_table(summaries, paper_layout=True,
                                      published=published_acc_g)
  caption = (
      f'{preset.title}: {n} clients, {FLAGS.rounds} rounds, '
      f'{FLAGS.clients_per_round} clients per round ({FLAGS.sampling}), '
      f'(eps, delta) = ({",".join(FLAGS.epsilons)}, '
      f'{",".join(FLAGS.deltas)}), {FLAGS.opt_out_fraction:.0%} opt out, '
      f'seed {FLAGS.seed}. Published: {preset.published}.\n\n' +
      '\n'.join(warnings + tables.table_notes(
          FLAGS.release_unprotected_stats, audited=FLAGS.canaries > 0)))
  tables.write_table(preset_dir, header, rows, caption=caption,
                     records=tables.results_records(summaries,
                                                   published_acc_g))
  print(f'\n{caption}\n\n{tables.markdown_table(header, rows)}\n\n'
        f'Table, per-round files and plots: {preset_dir}/')
  for line in (line for s in summaries for line in tables.audit_alarms(s)):
    print(line)
  if elsewhere:
    print(f'\nRunning in other processes, not in the table: '
          f'{", ".join(elsewhere)}. Re-run this command after they finish '
          'for the whole table.')


def _validate() -> None:
  """The checks that need no data, every preset's flags included, before
  TensorFlow is imported; a --dry_run ends here."""
  names = _preset_names()
  lambdas = _lambdas_flag()
  _check_command(names)
  if FLAGS.output_dir is None:
    FLAGS['output_dir'].value = cli_flags.default_output_dir(
        'reproduce', ('presets', 'ditto_lambdas'))
  with _flags_of_each_preset(names) as presets:
    for name in presets:
      if FLAGS.dry_run and name in FIGURES:
        print(f'--dry_run: preset {name}: {cli_flags.run_summary()}, on '
              f'{",".join(_DISTRIBUTIONS.value or FIGURES[name].distributions)}'
              f' (under {name}/).')
      elif FLAGS.dry_run:
        blocks = PRESETS[name].ditto_lambdas if lambdas is None else lambdas
        print(f'--dry_run: preset {name}: {cli_flags.run_summary()}, Ditto '
              f'lambda {",".join(f"{lam:g}" for lam in blocks) or "none"} '
              f'(under {name}/).')
  if FLAGS.dry_run:
    sys.exit(0)


def main(argv: list[str]) -> None:
  del argv  # cli.entry refuses stray arguments
  cli_trusted.start_command()
  names = _preset_names()
  lambdas = _lambdas_flag()
  if not FLAGS['output_dir'].present:
    print(f'Files go to {FLAGS.output_dir}/ (no --output_dir: a folder named '
          'by the flags; the same command resumes there).')
  cli_flags.init_runtime()
  with _flags_of_each_preset(names) as presets:
    for name in presets:
      if name in FIGURES:
        cli_untrusted.run_figure(FIGURES[name],
                                 os.path.join(FLAGS.output_dir, name),
                                 _DISTRIBUTIONS.value)
      else:
        _run_preset(name, FLAGS.output_dir, lambdas)


def run() -> None:
  """The command line (a user script that registers its own algorithm or
  task calls this after registering)."""
  entry.run(main, __doc__,
            [('reproduce.py', ['presets', 'ditto_lambdas', 'distributions'])] +
            [(title, names) for title, names in cli_flags.help_groups()
             if any(s in cli_flags.APPLIES[n] for n in names
                    for s in (cli_flags.TRUSTED, cli_flags.UNTRUSTED))],
            _validate, share_output_dir=True)


if __name__ == '__main__':
  run()

"""Checks the papers' claims on finished runs; exits 1 if one fails.

Reads the summary.json files that reproduce.py and run_experiment.py wrote
(`tff_hdp.reporting.paper_claims` says what each claim compares), prints each claim
as HOLDS or FAILS with its numbers, and the untrusted-server table. E.g.

  .venv/bin/python benchmarks/paper_claims.py \\
      --preset_dirs=results/mnist/mnist_noniid,results/skewed/mnist_noniid_skewed \\
      --cross_silo_dirs=results/school_eps6 --untrusted_dirs=results/untrusted \\
      --noise_power_files=results/table2_fashion_mnist.json
  .venv/bin/python benchmarks/paper_claims.py \
      --preset_dirs=results/robust_hdp_fig2/robust_hdp_fig2

A robust_hdp_fig2 folder (Robust-HDP's Figure 2) is checked on whatever
distributions have finished, with the table of their Acc_g.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402
from tff_hdp.cli.cross_silo import SPECTRUM_ENDS  # noqa: E402

from tff_hdp.reporting import tables  # noqa: E402
from tff_hdp.cli.presets import FIGURES  # noqa: E402
from tff_hdp.cli.presets import PRESETS  # noqa: E402

if TYPE_CHECKING:
  from tff_hdp.reporting import paper_claims

_PRESET_DIRS = flags.DEFINE_list(
    'preset_dirs', [], 'reproduce.py preset folders (<output_dir>/<preset>); '
    'the folder name is the preset.')
_CROSS_SILO_DIRS = flags.DEFINE_list(
    'cross_silo_dirs', [], 'Folders of cross-silo runs of one task and '
    'privacy setting (any depth): local, fedavg and mrmtl sweeps.')
_UNTRUSTED_DIRS = flags.DEFINE_list(
    'untrusted_dirs', [], 'Folders of untrusted-server runs of one setting '
    '(any depth), over seeds and learning rates.')
_NOISE_POWER_FILES = flags.DEFINE_list(
    'noise_power_files', [], 'JSON files benchmarks/noise_power.py wrote '
    '(--output): Robust-HDP\'s Table 2.')
_PLOT_DIR = flags.DEFINE_string(
    'plot_dir', None, 'Where to write each cross-silo folder\'s MR-MTL curve '
    'over lambda (<folder>_mrmtl_vs_lambda.png).')
_MARGIN = flags.DEFINE_float(
    'margin', 2.0, 'Points by which FedHDP r=0.01 must beat DP-FedAvg.')
_TEST_EXAMPLES = flags.DEFINE_integer(
    'test_examples', 10_000, 'Size of the server test set the accuracies are '
    'measured on (MNIST: 10,000); sets what counts as a tie.')
_MIN_SEEDS = flags.DEFINE_integer(
    'min_seeds', 3, 'Seeds every untrusted-server rule must have run.')


def _print_cross_silo(directory: str) -> None:
  """Each method's best run and MR-MTL's curve over lambda; with --plot_dir,
  the curve beside local's and FedAvg's best (the MR-MTL paper's Fig. 5)."""
  # pylint: disable=g-import-not-at-top,redefined-outer-name
  from tff_hdp.reporting import paper_claims
  from tff_hdp.reporting import plots
  from tff_hdp.simulation import cross_silo_setting
  # pylint: enable=g-import-not-at-top,redefined-outer-name
  sweep = paper_claims.cross_silo_sweep(directory)
  metric, best, curve, runs = (sweep['metric'], sweep['best'], sweep['curve'],
                               sweep['runs'])
  print(f"\n{directory}: {sweep['task']}, silo eps {sweep['epsilons']}, each "
        f'method at its best setting\n')
  print(tables.markdown_table(
      ['method', 'lambda', 'learning rate', metric.label, 'runs'],
      [[m, f"{s['settings']['regularization']:g}"
        if cross_silo_setting.algorithm_record(m).regularized else '-',
        f"{s['settings']['learning_rate']:g}", f"{s['metric']:.5g}",
        str(runs[m])] for m, s in sorted(best.items())]))
  if not curve:
    return
  print(f'\nMR-MTL: best {metric.label} over learning rates, per lambda\n')
  print(tables.markdown_table(
      ['lambda', 'learning rate', metric.label],
      [[f'{lam:g}', f"{s['settings']['learning_rate']:g}",
        f"{s['metric']:.5g}"] for lam, s in curve.items()]))
  if _PLOT_DIR.value:
    name = os.path.basename(os.path.normpath(directory))
    path = os.path.join(_PLOT_DIR.value, f'{name}_mrmtl_vs_lambda.png')
    plots.metric_vs_lambda(
        list(curve), {'MR-MTL': [s['metric'] for s in curve.values()]}, path,
        ylabel=metric.label, title=f"{sweep['task']}, eps {sweep['epsilons']}",
        reference={f'{m} (best)': best[m]['metric']
                   for m in SPECTRUM_ENDS if m in best})
    print(f'\nwrote {path}')


def _print_figure(figure_dir: str) -> None:
  """Acc_g per finished distribution and rule (the mean over seeds), and
  the seeds' Acc_g where there are several."""
  from tff_hdp.reporting import paper_claims  # pylint: disable=g-import-not-at-top,redefined-outer-name
  table = paper_claims.figure_table(figure_dir)
  means = paper_claims.figure_means(table)
  rules = paper_claims.FIGURE_RULES
  print(f'\n{figure_dir}: Acc_g (%) per finished distribution (mean over '
        'seeds)\n')
  print(tables.markdown_table(
      ['distribution', 'seeds', *rules],
      [[f'Dist{k}', ','.join(map(str, table[k])),
        *(f'{acc[r]:.2f}' for r in rules)] for k, acc in means.items()]))
  several = {k: seeds for k, seeds in table.items() if len(seeds) > 1}
  if several:
    print('\nPer seed:\n')
    print(tables.markdown_table(
        ['distribution', 'seed', *rules],
        [[f'Dist{k}', seed, *(f'{acc[r]:.2f}' for r in rules)]
         for k, seeds in several.items() for seed, acc in seeds.items()]))


def _claims() -> list[paper_claims.Claim]:
  from tff_hdp.reporting import paper_claims  # pylint: disable=g-import-not-at-top,redefined-outer-name
  claims = []
  for preset_dir in _PRESET_DIRS.value:
    preset = os.path.basename(os.path.normpath(preset_dir))
    if preset in FIGURES:
      _print_figure(preset_dir)
      claims += paper_claims.figure_claims(preset_dir, _TEST_EXAMPLES.value)
      continue
    if preset not in PRESETS:
      raise ValueError(f'--preset_dirs: {preset_dir} is not named after a '
                       f'preset ({", ".join([*PRESETS, *FIGURES])}).')
    claims += paper_claims.fedhdp_claims(preset, preset_dir, _MARGIN.value,
                                         _TEST_EXAMPLES.value)
    if preset == 'mnist_noniid_skewed':
      claims += paper_claims.opt_out_gain_claims(preset, preset_dir)
  for directory in _CROSS_SILO_DIRS.value:
    _print_cross_silo(directory)
    claims += [paper_claims.cross_silo_claim(directory),
               paper_claims.mrmtl_lambda_claim(directory)]
  for directory in _UNTRUSTED_DIRS.value:
    rows = paper_claims.untrusted_table(directory)
    print(f'\n{directory}: Acc_g over seeds, each rule at its best learning '
          'rate\n')
    print(tables.markdown_table(
        ['algorithm', 'lr (tried)', 'Acc_g mean +- sd', 'per seed'],
        [[r['algorithm'],
          f"{r['learning_rate']:g} ({', '.join(f'{x:g}' for x in r['learning_rates_tried'])})",
          f"{r['mean']:.2f} +- {r['sd']:.2f}",
          ' / '.join(f'{a:.2f}' for a in r['acc_g'])] for r in rows]))
    claims.append(paper_claims.untrusted_claim(rows, _MIN_SEEDS.value))
  for path in _NOISE_POWER_FILES.value:
    with open(path) as f:
      claims += paper_claims.noise_power_claims(json.load(f))
  return claims


def main(argv: list[str]) -> None:
  from tff_hdp.reporting import paper_claims  # pylint: disable=g-import-not-at-top,redefined-outer-name
  if len(argv) > 1:
    sys.exit(f'paper_claims.py: error: unexpected arguments: {argv[1:]}')
  try:
    claims = _claims()
  except (OSError, ValueError) as e:
    sys.exit(f'paper_claims.py: error: {e}')
  if not claims:
    sys.exit('paper_claims.py: error: nothing to check; give --preset_dirs, '
             '--cross_silo_dirs, --untrusted_dirs or --noise_power_files.')
  print()
  failed = paper_claims.print_claims(claims)
  print(f'\n{len(claims) - failed} of {len(claims)} claims hold.')
  sys.exit(1 if failed else 0)


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

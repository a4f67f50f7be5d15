"""Runs FedHDP / FeO2 experiments from the command line.

Examples:
  python run_experiment.py --task=digits --algorithms=nonprivate,dp_fedavg,fedhdp \
      --r=0.1,1 --rounds=60 --output_dir=results/demo
  python run_experiment.py --task=point_estimation --r=0.2,1

Each configuration writes `<output_dir>/<config>/rounds.csv` (one row per
round: clip norm, per-group counts, noise and epsilon spent, metrics) and
`summary.json`; the comparison table is printed and saved as `results.md` and
`results.csv` in `--output_dir`.
"""

from __future__ import annotations

import sys

from absl import app

import tff_hdp  # noqa: F401  (quiets TF and imports it before app.run)

from cli import cross_silo
from cli import flags
from cli import point_estimation
from cli import trusted
from cli import untrusted


def main(argv: list[str]) -> None:
  try:
    if len(argv) > 1:
      raise flags.InputError(f'unexpected arguments: {argv[1:]}')
    flags.validate_flags()
    from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
    runtime.init()
    if flags.TASK.value == 'point_estimation':
      point_estimation.run()
    elif flags.setting(flags.ALGORITHMS.value[0]) == 'untrusted':
      untrusted.run()
    elif flags.setting(flags.ALGORITHMS.value[0]) == 'cross_silo':
      cross_silo.run()
    else:
      trusted.run()
  except flags.InputError as e:
    sys.exit(f'run_experiment.py: error: {e}')


if __name__ == '__main__':
  if sys.version_info[:2] != (3, 11):
    sys.exit(f'tff-hdp needs Python 3.11 (TensorFlow 2.14 / TFF 0.87); this '
             f'is Python {sys.version.split()[0]}.')
  app.run(main)

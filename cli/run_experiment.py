"""Runs FedHDP / FeO2 experiments from the command line.

Usage: python run_experiment.py [--flag=value ...]

Examples:
  python run_experiment.py
      (the embedded digits task, FedHDP, 60 rounds: prints the table)
  python run_experiment.py --task=digits --r=0.1,1 --rounds=40
      --algorithms=nonprivate,dp_fedavg,fedhdp --clients_per_round=20
      --output_dir=results/demo
  python run_experiment.py --task=mnist_noniid --data_dir=../shared/data/mnist
  python run_experiment.py --algorithms=robust_hdp,weiavg,dpfedavg --rounds=20
  python run_experiment.py --task=school --algorithms=local,mrmtl --sweep
  python run_experiment.py --task=point_estimation --r=0.2,1
  python run_experiment.py --task=mnist_noniid --dry_run
      (checks the flags and says what would run, trains nothing)

Each configuration writes `<output_dir>/<config>/rounds.csv` (one row per
round: clip norm, per-group counts, noise and epsilon spent, metrics) and
`summary.json`; the comparison table is printed and saved as `results.md` and
`results.csv` in `--output_dir`. Without --output_dir the folder is
results/<task>-<hash of the flags>, printed at the start, so different
commands never share one. Re-running the same command resumes.
"""

from __future__ import annotations

import sys

from tff_hdp.cli import entry  # first: names a Python without the stack in one line
from tff_hdp.cli import flags


def main(argv: list[str]) -> None:
  del argv  # cli.entry refuses stray arguments
  # pylint: disable=g-import-not-at-top
  from tff_hdp.cli import cross_silo
  from tff_hdp.cli import point_estimation
  from tff_hdp.cli import trusted
  from tff_hdp.cli import untrusted
  # pylint: enable=g-import-not-at-top
  if not flags.OUTPUT_DIR.present:
    print(f'Files go to {flags.OUTPUT_DIR.value}/ (no --output_dir: a folder '
          'named by the flags; the same command resumes there).')
  flags.init_runtime()
  run = {flags.TRUSTED: trusted.run, flags.UNTRUSTED: untrusted.run,
         flags.CROSS_SILO: cross_silo.run,
         flags.POINT_ESTIMATION: point_estimation.run}[flags.run_setting()]
  run()


def _validate() -> None:
  """The flag checks; a --dry_run ends here, before TensorFlow is loaded."""
  flags.validate_flags()
  if flags.DRY_RUN.value:
    print(f'--dry_run: the flags are valid: {flags.run_summary()}.')
    sys.exit(0)


def run() -> None:
  """The command line; a user script that registers its own algorithm or
  task calls this after registering."""
  entry.run(main, __doc__, flags.help_groups(), _validate)


if __name__ == '__main__':
  run()

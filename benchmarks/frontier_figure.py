"""The bias/noise frontier of finished frontier_sampling runs: each run's
Acc_g and worst group's accuracy against its printed noise divisor, one
point per t (RESULTS.md §14; `plots.accuracy_vs_noise_divisor`).

  .venv/bin/python benchmarks/frontier_figure.py \\
      --runs='results/follow_data/by_label_*seed0' \\
      --output=figures/frontier_by_label_mnist_seed0.png
"""

from __future__ import annotations

import glob
import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.cli import entry  # noqa: E402  (first: names a Python without the stack)
from tff_hdp.reporting import plots  # noqa: E402

_RUNS = flags.DEFINE_string(
    'runs', None, 'A glob of run folders (--output_dir of run_experiment.py) '
    'holding frontier_sampling/summary.json.', required=True)
_OUTPUT = flags.DEFINE_string('output', None, 'The figure (.png).',
                              required=True)
_TITLE = flags.DEFINE_string('title', None, 'The figure\'s title.')


def main(argv):
  del argv
  found = sorted(glob.glob(os.path.join(_RUNS.value, 'frontier_sampling',
                                        'summary.json')))
  if not found:
    raise entry.InputError(f'--runs={_RUNS.value}: no frontier_sampling/'
                           'summary.json under it.')
  summaries = [plots.read_summary(os.path.dirname(f)) for f in found]
  plots.accuracy_vs_noise_divisor(summaries, _OUTPUT.value, title=_TITLE.value)
  for s in sorted(summaries, key=lambda s: s['tilt']):
    print(f"t={s['tilt']:g}: noise on the mean S/{s['noise_divisor']:.1f}, "
          f"Acc_g {s['metrics']['acc_g']:.2f}, worst group "
          f"{s['metrics'].get('acc_g_worst') or float('nan'):.2f}")
  print(f'Wrote {_OUTPUT.value}')


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

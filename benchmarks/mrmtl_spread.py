"""How far finished MR-MTL runs' personal models sit from their mean, and
what that costs: each run's test metric with every silo's own final model
(as the run reports it) and with their mean (weighted by training examples)
deployed to every silo.

A measurement behind RESULTS.md §8: at a strong privacy level the personal
models carry their own silo's DP noise, which FedAvg's average cancels, so
MR-MTL's best can trail FedAvg's even at large lambda.

  .venv/bin/python benchmarks/mrmtl_spread.py --task=school \\
      --run_dirs=results/mrmtl_sweeps/school_eps2/mrmtl_lr0.01_lambda10
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from typing import TYPE_CHECKING

from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from benchmarks import silo_task  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402
from tff_hdp.reporting import tables  # noqa: E402

if TYPE_CHECKING:
  from tff_hdp.learning import ditto

_RUN_DIRS = flags.DEFINE_list('run_dirs', [], 'Finished MR-MTL run folders '
                              '(<output_dir>/mrmtl_lr*_lambda*) of --task.')


def _final_personal(run_dir: str, client_ids) -> ditto.PersonalModels:
  from tff_hdp.learning import ditto  # pylint: disable=g-import-not-at-top,redefined-outer-name
  files = glob.glob(os.path.join(run_dir, 'checkpoints', 'personal_round_*.npz'))
  if not files:
    raise entry.InputError(f'--run_dirs: {run_dir} has no personal-model '
                           'checkpoint (a finished cross-silo run keeps one).')
  last = max(files, key=lambda f: int(re.findall(r'\d+', f)[-1]))
  return ditto.PersonalModels.load(last, client_ids)


def main(argv) -> None:
  del argv
  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff
  from tff_hdp.simulation import cross_silo_setting
  # pylint: enable=g-import-not-at-top
  if not _RUN_DIRS.value:
    raise entry.InputError('--run_dirs: give at least one MR-MTL run folder.')
  task, _ = silo_task.load()
  sizes = np.array([task.num_train_examples(c) for c in task.client_ids],
                   float)
  rows = []
  for run_dir in _RUN_DIRS.value:
    with open(os.path.join(run_dir, 'summary.json')) as f:
      summary = json.load(f)
    if summary.get('method') != 'mrmtl' or summary['task'] != task.name:
      raise entry.InputError(f'--run_dirs: {run_dir} is not an MR-MTL run of '
                             f'{task.name}.')
    personal = _final_personal(run_dir, task.client_ids)
    if len(personal) != len(task.client_ids):
      raise entry.InputError(f'--run_dirs: {run_dir} keeps {len(personal)} '
                             f'personal models for {len(task.client_ids)} silos.')
    weights = [personal.get(c, ()) for c in task.client_ids]
    mean = [np.tensordot(sizes / sizes.sum(), np.stack(v), 1)
            for v in zip(*weights)]
    spread = float(np.mean([sum(np.sum((w - m)**2) for w, m in zip(ws, mean))
                            for ws in weights]))
    # Scored as the run scores its silos (test-count weighted): each with its
    # own model, then every silo with the mean.
    own = cross_silo_setting.test_weighted_metric(task, {
        c: tff.learning.models.ModelWeights(w, []) for c, w in
        zip(task.client_ids, weights)})
    shared_model = tff.learning.models.ModelWeights(mean, [])
    shared = cross_silo_setting.test_weighted_metric(
        task, {c: shared_model for c in task.client_ids})
    s = summary['settings']
    rows.append([f"{s['epsilons'][0]:g}", f"{s['regularization']:g}",
                 f"{s['learning_rate']:g}", f"{summary['metric']:.5g}",
                 f'{own:.5g}', f'{shared:.5g}', f'{spread:.4g}'])
  label = task.metric_record.label
  print(tables.markdown_table(
      ['eps', 'lambda', 'lr', f'{label} (summary)', f'{label}, own models',
       f'{label}, their mean', 'mean sq. distance to the mean'], rows))


if __name__ == '__main__':
  entry.run(main, __doc__)

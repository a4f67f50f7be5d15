"""CPU seconds of the PLD work a run and the planner do, with each
subsampled-Gaussian PLD built by dp_accounting's `from_gaussian_mechanism`
and by `subsampled_gaussian_pld` (the same PMFs, its inversion over the
grid at once), back to back in one process, every cache cleared between:

- plan: FeO2 MNIST thirds (2,000 clients, 100 a round, 500 rounds, delta
  1e-4, eps 1 / 3.6 / 10): the rules' plans and the best one-noise plan's
  certificate (`plan.py`'s first two parts);
- ledger: that run's rounds.csv epsilon columns (every round of 500, three
  groups, FedHDP's plan);
- silos: School's 139 silos at eps 6 planned from their stored
  calibrations (`silo_noise_calibrations.json`).

  .venv/bin/python benchmarks/pld_build.py
  .venv/bin/python benchmarks/pld_build.py --workloads=ledger,silos
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import accounting_bench  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402
from tff_hdp.privacy import accounting  # noqa: E402

_WORKLOADS = flags.DEFINE_list('workloads', ['plan', 'ledger', 'silos'],
                               'Which of plan, ledger, silos to time.')


def _plan():
  from tff_hdp.privacy import planner  # pylint: disable=g-import-not-at-top
  assignment, sampling, clip = accounting_bench.thirds(accounting.PLD)
  rules = planner.plan_rules(assignment, sampling, 500, clip, 7850)
  individualized = next(r.plan for r in rules
                        if r.algorithm == 'individualized_sampling')
  best = planner.best_one_noise_plan(individualized)
  return f'{best.rates_evaluated} rates, gap {100 * best.certified_gap:.2f}%'


def _ledger():
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  assignment, sampling, clip = accounting_bench.thirds(accounting.PLD)
  fed = plans.plan_privacy(assignment, sampling, 500, clip)
  last = [fed.ledger.epsilons(t) for t in range(1, 501)][-1]
  return 'eps at 500: ' + ', '.join(f'{e:.4f}' for e in last)


def _silos(path):
  from benchmarks import silo_task  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  task, algorithm = silo_task.load()
  settings = cse.CrossSiloSettings(
      rounds=200, epsilons=(6.0,), delta=1e-3, learning_rate=0.1,
      clip_norm=1.0, accountant='pld')
  if not os.path.exists(path):
    cse.plan_silos(task, algorithm, settings, calibrations=path)
    accounting_bench.clear_caches()
  start = time.process_time()
  plans = cse.plan_silos(task, algorithm, settings, calibrations=path)
  spent = max(p.epsilon_after(200) for p in plans)
  return f'largest epsilon {spent:.6f}', time.process_time() - start


def main(argv):
  del argv
  from dp_accounting.pld import privacy_loss_distribution  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import subsampled_gaussian_pld  # pylint: disable=g-import-not-at-top

  def theirs(z, q, d):
    return privacy_loss_distribution.from_gaussian_mechanism(
        z, sampling_prob=q, value_discretization_interval=d)

  folder = tempfile.mkdtemp()
  accounting_bench.back_to_back(
      subsampled_gaussian_pld, 'from_gaussian_mechanism',
      (('dp_accounting', theirs),
       ('grid', subsampled_gaussian_pld.from_gaussian_mechanism)),
      {'plan': _plan, 'ledger': _ledger,
       'silos': lambda: _silos(os.path.join(folder, 'calibrations.json'))},
      _WORKLOADS.value)

if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

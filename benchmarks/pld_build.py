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

from tff_hdp.cli import entry  # noqa: E402

_WORKLOADS = flags.DEFINE_list('workloads', ['plan', 'ledger', 'silos'],
                               'Which of plan, ledger, silos to time.')


def _clear():
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  for cache in (plans.plan_client_privacy, plans.plan_privacy,
                accounting.calibrate_noise_multiplier,
                accounting.calibrate_sampling_rate,
                accounting._pld_noise_at,  # pylint: disable=protected-access
                accounting.pld_epsilon,
                accounting._subsampled_gaussian_pld):  # pylint: disable=protected-access
    if hasattr(cache, 'cache_clear'):
      cache.cache_clear()


def _thirds():
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import privacy_groups as pg  # pylint: disable=g-import-not-at-top
  groups = [pg.PrivacyGroup(f'eps{e:g}', e, 1e-4) for e in (1.0, 3.6, 10.0)]
  assignment = pg.assign_by_fractions(list(range(2000)), groups,
                                      [1 / 3] * 3, seed=0)
  sampling = accounting.PoissonSampling(0.05, accounting.PLD)
  z_b, _ = plans.default_clip_count_stddev(groups, sampling, 500, 2000)
  return assignment, sampling, plans.ClipSettings(count_stddev=z_b)


def _plan():
  from tff_hdp.privacy import planner  # pylint: disable=g-import-not-at-top
  assignment, sampling, clip = _thirds()
  rules = planner.plan_rules(assignment, sampling, 500, clip, 7850)
  individualized = next(r.plan for r in rules
                        if r.algorithm == 'individualized_sampling')
  best = planner.best_one_noise_plan(individualized)
  return f'{best.rates_evaluated} rates, gap {100 * best.certified_gap:.2f}%'


def _ledger():
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  assignment, sampling, clip = _thirds()
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
    _clear()
  start = time.process_time()
  plans = cse.plan_silos(task, algorithm, settings, calibrations=path)
  spent = max(p.epsilon_after(200) for p in plans)
  return f'largest epsilon {spent:.6f}', time.process_time() - start


def main(argv):
  del argv
  from dp_accounting.pld import privacy_loss_distribution  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import subsampled_gaussian_pld  # pylint: disable=g-import-not-at-top
  grid = subsampled_gaussian_pld.from_gaussian_mechanism

  def theirs(z, q, d):
    return privacy_loss_distribution.from_gaussian_mechanism(
        z, sampling_prob=q, value_discretization_interval=d)

  folder = tempfile.mkdtemp()
  print(f'{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} '
        'at the start; CPU seconds')
  for name in _WORKLOADS.value:
    for label, builder in (('dp_accounting', theirs), ('grid', grid)):
      subsampled_gaussian_pld.from_gaussian_mechanism = builder
      _clear()
      start = time.process_time()
      if name == 'silos':
        what, seconds = _silos(os.path.join(folder, 'calibrations.json'))
      else:
        what = {'plan': _plan, 'ledger': _ledger}[name]()
        seconds = time.process_time() - start
      print(f'{name:7s} {label:14s} {seconds:8.2f} s   ({what})', flush=True)
  subsampled_gaussian_pld.from_gaussian_mechanism = grid


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

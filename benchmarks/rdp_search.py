"""CPU seconds of the RDP calibrations, with their searches steered by
dp_accounting's own term-by-term series and by `sampled_gaussian_rdp` (the
same series summed with numpy), back to back in one process, every cache
cleared between; either way dp_accounting's bound checks what a search
returns, so the two must print the same multipliers and rates to ~1e-11:

- plan: FeO2 MNIST thirds (2,000 clients, 100 a round, 500 rounds, delta
  1e-4, eps 1 / 3.6 / 10), RDP accountant: the planner's rules
  (`plan.py --accountant=rdp`'s first part);
- rates: individualized sampling's rate search, each of the three targets
  at 12 noise multipliers from 0.5 to 8.

  .venv/bin/python benchmarks/rdp_search.py
  .venv/bin/python benchmarks/rdp_search.py --workloads=rates
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.cli import entry  # noqa: E402

_WORKLOADS = flags.DEFINE_list('workloads', ['plan', 'rates'],
                               'Which of plan, rates to time.')


def _clear():
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  for cache in (plans.plan_client_privacy, plans.plan_privacy,
                accounting.calibrate_noise_multiplier,
                accounting.calibrate_sampling_rate,
                accounting._one_event_rdp):  # pylint: disable=protected-access
    if hasattr(cache, 'cache_clear'):
      cache.cache_clear()


def _thirds():
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import privacy_groups as pg  # pylint: disable=g-import-not-at-top
  groups = [pg.PrivacyGroup(f'eps{e:g}', e, 1e-4) for e in (1.0, 3.6, 10.0)]
  assignment = pg.assign_by_fractions(list(range(2000)), groups,
                                      [1 / 3] * 3, seed=0)
  sampling = accounting.PoissonSampling(0.05, accounting.RDP)
  z_b, _ = plans.default_clip_count_stddev(groups, sampling, 500, 2000)
  return assignment, sampling, plans.ClipSettings(count_stddev=z_b)


def _plan():
  from tff_hdp.privacy import planner  # pylint: disable=g-import-not-at-top
  assignment, sampling, clip = _thirds()
  rules = planner.plan_rules(assignment, sampling, 500, clip, 7850)
  return '; '.join(
      f'{r.algorithm} z ' + '/'.join(f'{z:.12g}' for z in
                                     r.plan.noise_multipliers[:3])
      for r in rules if r.algorithm in ('fedhdp', 'individualized_sampling'))


def _rates():
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  rates = [accounting.calibrate_sampling_rate(eps, 1e-4, 0.5 * 16**(k / 11),
                                              None, 500)
           for eps in (1.0, 3.6, 10.0) for k in range(12)]
  return f'rates from {min(rates):.12g} to {max(rates):.12g}'


def main(argv):
  del argv
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import sampled_gaussian_rdp  # pylint: disable=g-import-not-at-top
  numpy_sum = sampled_gaussian_rdp.rdp

  def theirs(q, z, order):
    return rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(  # pylint: disable=protected-access
        q, z, [order])[0]

  print(f'{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} '
        'at the start; CPU seconds')
  for name in _WORKLOADS.value:
    for label, steer in (('dp_accounting', theirs), ('numpy', numpy_sum)):
      sampled_gaussian_rdp.rdp = steer
      _clear()
      start = time.process_time()
      what = {'plan': _plan, 'rates': _rates}[name]()
      seconds = time.process_time() - start
      print(f'{name:6s} {label:14s} {seconds:8.2f} s   ({what})', flush=True)
  sampled_gaussian_rdp.rdp = numpy_sum


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

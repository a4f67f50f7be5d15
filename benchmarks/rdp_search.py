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

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import accounting_bench  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402
from tff_hdp.privacy import accounting  # noqa: E402

_WORKLOADS = flags.DEFINE_list('workloads', ['plan', 'rates'],
                               'Which of plan, rates to time.')


def _plan():
  from tff_hdp.privacy import planner  # pylint: disable=g-import-not-at-top
  assignment, sampling, clip = accounting_bench.thirds(accounting.RDP)
  rules = planner.plan_rules(assignment, sampling, 500, clip, 7850)
  return '; '.join(
      f'{r.algorithm} z ' + '/'.join(f'{z:.12g}' for z in
                                     r.plan.noise_multipliers[:3])
      for r in rules if r.algorithm in ('fedhdp', 'individualized_sampling'))


def _rates():
  rates = [accounting.calibrate_sampling_rate(eps, 1e-4, 0.5 * 16**(k / 11),
                                              None, 500)
           for eps in (1.0, 3.6, 10.0) for k in range(12)]
  return f'rates from {min(rates):.12g} to {max(rates):.12g}'


def main(argv):
  del argv
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import sampled_gaussian_rdp  # pylint: disable=g-import-not-at-top

  def theirs(q, z, order):
    return rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(  # pylint: disable=protected-access
        q, z, [order])[0]

  accounting_bench.back_to_back(
      sampled_gaussian_rdp, 'rdp',
      (('dp_accounting', theirs), ('numpy', sampled_gaussian_rdp.rdp)),
      {'plan': _plan, 'rates': _rates}, _WORKLOADS.value)

if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

"""The noise PLD accounting saves at the trusted setting's sampled targets.

For each setting of RESULTS.md that samples clients (Poisson), the noise
multipliers the run's plan calibrates with RDP (`--accountant=rdp`) and with
the PLD (`--accountant=pld`, the default), through the same planning code a
run uses (`plans.default_clip_count_stddev`, `plans.plan_privacy`,
`plans.plan_individualized_sampling`), and each plan's noise on the mean as
a fraction of the clip norm S: FedHDP's sum_j w_j^2 z_j^2 / D_j^2 at
weights by size (one noise draw a group), individualized sampling's
z / (sum_j q_j N_j) (one draw). Then the seconds the PLD ledger takes to
account every round of a 500-round run (rounds.csv's epsilon columns).

  .venv/bin/python benchmarks/pld_vs_rdp.py
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.cli import entry  # noqa: E402
from tff_hdp.privacy import accounting  # noqa: E402
from tff_hdp.privacy import plans  # noqa: E402
from tff_hdp.privacy import privacy_groups as pg  # noqa: E402

# (name, clients, clients a round, rounds, levels (eps), delta, opt-out).
_SETTINGS = (
    ('FeO2 MNIST thirds (RESULTS §11)', 2000, 100, 500, (1.0, 3.6, 10.0),
     1e-4, 0.0),
    ('FeO2 MNIST thirds, 5% opt-out (§11)', 2000, 100, 500,
     (1.0, 3.6, 10.0), 1e-4, 0.05),
    ('FeO2 MNIST, eps 3.6 (§1)', 2000, 100, 500, (3.6,), 1e-4, 0.05),
    ('FMNIST, eps 0.6 (§3)', 3383, 100, 500, (0.6,), 1e-4, 0.05),
    ('FEMNIST, eps 4.1 (§4)', 3400, 100, 500, (4.1,), 1e-4, 0.05),
)


def _assignment(n, levels, delta, opt_out):
  ids = list(range(n))
  groups = [pg.PrivacyGroup(f'eps{e:g}', e, delta) for e in levels]
  if opt_out:
    return pg.assign_opt_out(ids, groups, opt_out, seed=0)
  return pg.assign_by_fractions(ids, groups, [1 / len(levels)] * len(levels),
                                seed=0)


def _plans(n, per_round, rounds, levels, delta, opt_out, accountant):
  sampling = accounting.PoissonSampling(per_round / n, accountant)
  assignment = _assignment(n, levels, delta, opt_out)
  private = [g for g in assignment.groups if g.is_private]
  z_b, _ = plans.default_clip_count_stddev(private, sampling, rounds, n)
  clip = plans.ClipSettings(count_stddev=z_b)
  start = time.perf_counter()
  fedhdp = plans.plan_privacy(assignment, sampling, rounds, clip)
  seconds = time.perf_counter() - start
  individualized = (plans.plan_individualized_sampling(
      assignment, sampling, rounds, clip) if len(private) > 1 else None)
  return z_b, fedhdp, individualized, seconds


def _fedhdp_divisor(plan):
  """S / noise std on the mean at weights by size (one draw per group)."""
  sizes = plan.assignment.group_sizes()
  total = sum(sizes)
  variance = sum((n / total) ** 2 * (z / d) ** 2 for n, z, d in zip(
      sizes, plan.noise_multipliers, plan.expected_group_sizes)
                 if z > 0)
  return 1 / math.sqrt(variance)


def _individualized_divisor(plan):
  z = max(plan.noise_multipliers)
  private = sum(q * n for q, n, g in zip(plan.rates(),
                                         plan.assignment.group_sizes(),
                                         plan.assignment.groups)
                if g.is_private)
  return private / z


def main(argv):
  del argv
  for name, n, per_round, rounds, levels, delta, opt_out in _SETTINGS:
    print(f'\n{name}: N = {n}, q = {per_round}/{n}, {rounds} rounds, '
          f'delta {delta:g}')
    rows = {}
    for accountant in (accounting.RDP, accounting.PLD):
      rows[accountant.name] = _plans(n, per_round, rounds, levels, delta,
                                     opt_out, accountant)
    (zb_r, fed_r, ind_r, _), (zb_p, fed_p, ind_p, secs) = (rows['rdp'],
                                                          rows['pld'])
    print(f'  clip-count noise z_b: rdp {zb_r:.4g}, pld {zb_p:.4g}')
    for j, g in enumerate(fed_r.assignment.groups):
      if g.is_private:
        zr, zp = fed_r.noise_multipliers[j], fed_p.noise_multipliers[j]
        eps = fed_p.ledger.epsilon(j, rounds)
        print(f'  {g.name}: z rdp {zr:.4f}, z pld {zp:.4f} '
              f'({100 * (1 - zp / zr):.1f}% less); pld eps {eps:.4f}, '
              f'rdp eps at the pld z {fed_p.ledger.rdp_epsilon(j, rounds):.4f}')
    print(f'  FedHDP (weights by size): noise on the mean S/'
          f'{_fedhdp_divisor(fed_r):.1f} (rdp), S/{_fedhdp_divisor(fed_p):.1f}'
          f' (pld); pld calibration {secs:.2f} s')
    if ind_r is not None:
      print(f'  individualized sampling: z {max(ind_r.noise_multipliers):.4f}'
            f' (rdp), {max(ind_p.noise_multipliers):.4f} (pld); rates '
            + ', '.join(f'{a:.4f}/{b:.4f}' for a, b, g in zip(
                ind_r.rates(), ind_p.rates(), ind_r.assignment.groups)
                        if g.is_private)
            + f' (rdp/pld); noise on the mean S/'
            f'{_individualized_divisor(ind_r):.1f} (rdp), S/'
            f'{_individualized_divisor(ind_p):.1f} (pld)')
  _, fed, _, _ = _plans(2000, 100, 500, (1.0, 3.6, 10.0), 1e-4, 0.0,
                        accounting.PLD)
  start = time.perf_counter()
  for t in range(1, 501):
    fed.ledger.epsilons(t)
  print(f'\nPLD ledger, every round of 500 (three groups): '
        f'{time.perf_counter() - start:.1f} s')


if __name__ == '__main__':
  entry.run(main, __doc__, needs_tensorflow=False)

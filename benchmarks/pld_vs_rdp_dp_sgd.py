"""The noise PLD accounting saves in DP-SGD: each client's z (untrusted
setting) and each silo's (cross-silo) at the targets of RESULTS.md.

Planned through the code a run uses (`plans.plan_clients`,
`cross_silo_setting.plan_silos`), once with `--accountant=rdp` and once
with `--accountant=pld` (no --pld_discretization: each client at the
coarsest of 1e-3, 1e-4, ... within the 1% tolerance). Pure arithmetic, no
training; School's silo sizes are read from its data folder.

  .venv/bin/python benchmarks/pld_vs_rdp_dp_sgd.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import silo_task  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402

_SCHOOL_EPSILON = flags.DEFINE_float('school_epsilon', 6.0,
                                     "Every School silo's epsilon (RESULTS §5).")


def _untrusted():
  """Robust-HDP's Dist1 clients at RESULTS §9 (Fashion-MNIST, 20 clients of
  2,400 training images, 200 rounds, delta 1e-4, the authors' batch sizes)."""
  from tff_hdp.privacy import heterogeneity  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  epsilons, batches = heterogeneity.client_budgets('dist1', 20, 0)
  print('Untrusted: Robust-HDP Dist1 (RESULTS §9): 20 clients of 2,400 '
        'examples, 200 rounds, delta 1e-4\n')
  print('| client | eps | batch | z (RDP) | z (PLD) | less noise | PLD '
        "discretization | RDP's epsilon at the PLD z |")
  print('|---|---|---|---|---|---|---|---|')
  found = {}
  for name in ('rdp', 'pld'):
    start = time.process_time()
    found[name] = plans.plan_clients(list(epsilons), 1e-4, [2400] * 20,
                                     list(batches), 200, accountant=name)
    found[name + ' s'] = time.process_time() - start
  savings = []
  for i, (r, p) in enumerate(zip(found['rdp'], found['pld'])):
    savings.append(1 - p.noise_multiplier / r.noise_multiplier)
    print(f'| {i} | {p.epsilon:g} | {p.batch_size} | '
          f'{r.noise_multiplier:.4f} | {p.noise_multiplier:.4f} | '
          f'{100 * savings[-1]:.1f}% | {p.accountant.discretization:g} | '
          f'{p.rdp_epsilon_after(200):.4f} |')
  print(f'\nless noise: {100 * min(savings):.1f}% - {100 * max(savings):.1f}% '
        f'(median {100 * statistics.median(savings):.1f}%); CPU seconds to '
        f"plan: rdp {found['rdp s']:.1f}, pld {found['pld s']:.1f}")


def _cross_silo():
  """School at RESULTS §5: every silo at eps 6, delta 1e-3, 200 rounds,
  batch 32, one epoch a round (MR-MTL)."""
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  task, algorithm = silo_task.load()
  eps = _SCHOOL_EPSILON.value
  found = {}
  for name in ('rdp', 'pld'):
    settings = cse.CrossSiloSettings(
        rounds=200, epsilons=(eps,), delta=1e-3, learning_rate=0.1,
        clip_norm=1.0, accountant=name)
    start = time.process_time()
    found[name] = cse.plan_silos(task, algorithm, settings)
    found[name + ' s'] = time.process_time() - start
  pairs = sorted(zip(found['rdp'], found['pld']),
                 key=lambda pair: pair[0].num_examples)
  print(f'\nCross-silo: School (RESULTS §5), {len(pairs)} silos at eps '
        f'{eps:g}, delta 1e-3, 200 rounds, batch {silo_task.BATCH_SIZE.value}'
        f', {algorithm.name}\n')
  print('| silo examples | q | steps | z (RDP) | z (PLD) | less noise | '
        "RDP's epsilon at the PLD z |")
  print('|---|---|---|---|---|---|---|')
  for k in sorted({0, len(pairs) // 4, len(pairs) // 2, 3 * len(pairs) // 4,
                   len(pairs) - 1}):
    r, p = pairs[k]
    print(f'| {p.num_examples} | {p.sampling_rate:.4f} | '
          f'{p.rounds * p.steps_per_round} | {r.noise_multiplier:.4f} | '
          f'{p.noise_multiplier:.4f} | '
          f'{100 * (1 - p.noise_multiplier / r.noise_multiplier):.1f}% | '
          f'{p.rdp_epsilon_after(200):.4f} |')
  savings = [1 - p.noise_multiplier / r.noise_multiplier for r, p in pairs]
  used = sorted({p.accountant.discretization for _, p in pairs})
  print(f'\nall {len(pairs)} silos: {100 * min(savings):.1f}% - '
        f'{100 * max(savings):.1f}% less noise (median '
        f'{100 * statistics.median(savings):.1f}%); PLD discretization '
        + ', '.join(f'{d:g}' for d in used) + '; PLD epsilon at most '
        f"{max(p.epsilon_after(200) for _, p in pairs):.6f}; CPU seconds to "
        f"plan: rdp {found['rdp s']:.1f}, pld {found['pld s']:.1f}")


def main(argv):
  del argv
  _untrusted()
  _cross_silo()


if __name__ == '__main__':
  entry.run(main, __doc__)

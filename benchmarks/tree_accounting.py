"""The tree's accounting under min-separation, timed beside TF Privacy's.

For Gboard's es-ES pattern by default (z 7, n 2,000 rounds, separation 313,
at most 6 participations; Xu et al. 2023 report rho 0.81 zCDP and eps 8.90 at
delta 1e-10), prints this project's rho, the epsilon of the RDP conversion
the paper used and the exact Gaussian epsilon a run prints, each with the
seconds it took; then TF Privacy's `compute_zcdp_single_tree` on the same
pattern (its `min_separation` counts the rounds between, b - 1), unless
--skip_tf_privacy.

  .venv/bin/python benchmarks/tree_accounting.py
"""

from __future__ import annotations

import os
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.privacy import min_separation  # noqa: E402

_NOISE = flags.DEFINE_float('noise_multiplier', 7.0, 'z of the tree.')
_ROUNDS = flags.DEFINE_integer('rounds', 2000, 'Rounds n.')
_SEPARATION = flags.DEFINE_integer(
    'min_separation', 313, 'Least difference b between two rounds of one '
    'device.')
_PARTICIPATIONS = flags.DEFINE_integer('max_participations', 6,
                                       'Participations k a device allows.')
_DELTA = flags.DEFINE_float('delta', 1e-10, 'Delta of the printed epsilon.')
_SKIP = flags.DEFINE_bool('skip_tf_privacy', False,
                          "Skip TF Privacy's computation (minutes).")
for _name in ('rounds', 'min_separation', 'max_participations'):
  flags.register_validator(_name, lambda v: v >= 1,
                           f'--{_name} must be at least 1.')
flags.register_validator('noise_multiplier', lambda v: v > 0,
                         '--noise_multiplier must be positive.')
flags.register_validator('delta', lambda v: 0 < v < 1,
                         '--delta must lie in (0, 1).')


def main(argv):
  del argv
  z, delta = _NOISE.value, _DELTA.value
  model = min_separation.MinSeparation(
      _ROUNDS.value, _SEPARATION.value, _PARTICIPATIONS.value)
  start = time.time()
  rho = min_separation.tree_sensitivity_squared(model) / (2 * z * z)
  seconds = time.time() - start
  print(f'tff-hdp: rho {rho:.4f} zCDP ({seconds:.1f} s); eps at delta '
        f'{delta:g}: {min_separation.zcdp_epsilon(rho, delta):.4f} (RDP '
        'conversion), '
        f'{min_separation.gaussian_epsilon((2 * rho) ** 0.5, delta):.4f} '
        '(exact Gaussian)', flush=True)
  if _SKIP.value:
    return
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant
  start = time.time()
  theirs = tree_aggregation_accountant.compute_zcdp_single_tree(
      z, model.rounds, model.max_participations, model.min_separation - 1)
  print(f'TF Privacy: rho {theirs:.4f} zCDP ({time.time() - start:.1f} s)')


if __name__ == '__main__':
  app.run(main)

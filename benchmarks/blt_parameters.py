"""BLT parameters for a participation model, optimized offline.

For rounds n, separation b and at most k participations (default: Gboard's
es-ES pattern, n 2,000, b 313, k 6), finds the BLT strategy of each buffer
count with the least model noise per round (`tff_hdp.privacy.blt.optimize`)
and prints its noise relative to independent noise beside the online binary
tree's, at the same noise multiplier. Then, for the best BLT, the epsilon of
devices capped at fewer participations on the same stream (one noise
multiplier, calibrated for the k-participation devices at --epsilon).

The parameters are written to --output (JSON, keyed by "n,b,k,buffers") for
runs to read; the file in the repository is this command's output:

  .venv/bin/python benchmarks/blt_parameters.py
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.privacy import blt  # noqa: E402
from tff_hdp.privacy import min_separation  # noqa: E402

_ROUNDS = flags.DEFINE_integer('rounds', 2000, 'Rounds n.')
_SEPARATION = flags.DEFINE_integer(
    'min_separation', 313, 'Least difference b between two rounds of one '
    'device.')
_PARTICIPATIONS = flags.DEFINE_integer('max_participations', 6,
                                       'Participations k a device allows.')
_BUFFERS = flags.DEFINE_list('buffers', ['1', '2', '3'],
                             'Buffer counts to optimize.')
_EPSILON = flags.DEFINE_float('epsilon', 8.0, 'Target of the k-participation '
                              'devices for the capped-devices table.')
_DELTA = flags.DEFINE_float('delta', 1e-6, 'Delta of that table.')
_OUTPUT = flags.DEFINE_string(
    'output', os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), 'tff_hdp', 'privacy',
                           'blt_parameters.json'),
    'JSON file the parameters are added to.')

flags.register_validator(
    'buffers', lambda v: all(b.isdigit() and int(b) >= 1 for b in v),
    '--buffers takes positive whole numbers, e.g. --buffers=1,2,3.')
for _name in ('rounds', 'min_separation', 'max_participations'):
  flags.register_validator(_name, lambda v: v >= 1,
                           f'--{_name} must be at least 1.')
flags.register_validator('delta', lambda v: 0 < v < 1,
                         '--delta must lie in (0, 1).')
flags.register_validator('epsilon', lambda v: v > 0,
                         '--epsilon must be positive.')


def main(argv):
  del argv
  model = min_separation.MinSeparation(
      _ROUNDS.value, _SEPARATION.value, _PARTICIPATIONS.value)
  n = model.rounds
  print(f'n {n}, b {model.min_separation}, k {model.max_participations}: '
        'model noise per round relative to independent noise')
  print(f'  binary tree (plain estimator): {blt.tree_relative_rmse(model):.4f}')
  print('  binary tree (efficient estimator, TFF use_efficient=True): '
        f'{blt.tree_relative_rmse(model, efficient=True):.4f}')
  stored = {}
  if os.path.exists(_OUTPUT.value):
    with open(_OUTPUT.value) as f:
      stored = json.load(f)
  best = None
  for buffers in (int(b) for b in _BUFFERS.value):
    start = time.time()
    params = blt.optimize(model, buffers)
    rmse = blt.relative_rmse(params.coefficients(n), model)
    print(f'  BLT, {buffers} buffer(s): {rmse:.4f}  (thetas '
          f'{[round(t, 6) for t in params.thetas]}, omegas '
          f'{[round(w, 6) for w in params.omegas]}; '
          f'{time.time() - start:.0f} s)')
    key = f'{n},{model.min_separation},{model.max_participations},{buffers}'
    stored[key] = {'thetas': list(params.thetas),
                   'omegas': list(params.omegas), 'relative_rmse': rmse}
    if best is None or rmse < best[0]:
      best = (rmse, params)
  c = best[1].coefficients(n)
  sens2 = min_separation.toeplitz_sensitivity_squared(c, model)
  z = min_separation.calibrate_noise_multiplier(_EPSILON.value, _DELTA.value,
                                                model, sens2)
  print(f'One stream of the best BLT at z = {z:.4f} (eps {_EPSILON.value:g} '
        f'at delta {_DELTA.value:g} for k = {model.max_participations}):')
  for k in range(model.max_participations, 0, -1):
    capped = min_separation.MinSeparation(n, model.min_separation, k)
    mu = min_separation.toeplitz_sensitivity_squared(c, capped) ** 0.5 / z
    print(f'  devices capped at {k}: eps '
          f'{min_separation.gaussian_epsilon(mu, _DELTA.value):.3f}')
  with open(_OUTPUT.value, 'w') as f:
    json.dump(stored, f, indent=1, sort_keys=True)
    f.write('\n')
  print(f'Parameters written to {_OUTPUT.value}')


if __name__ == '__main__':
  app.run(main)

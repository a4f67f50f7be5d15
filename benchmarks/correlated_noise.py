"""Correlated noise without sampling: the tree's accounting and BLT's
parameters for a participation model.

For rounds n, separation b and at most k participations (default: Gboard's
es-ES pattern, n 2,000, b 313, k 6):

- the tree's accounting at --noise_multiplier (es-ES: z 7; Xu et al. 2023
  report rho 0.81 zCDP and eps 8.90 at delta 1e-10): rho, the epsilon of the
  RDP conversion the paper used and the exact Gaussian epsilon a run prints,
  timed; with --tf_privacy also TF Privacy's `compute_zcdp_single_tree` on
  the same pattern (its `min_separation` counts the rounds between, b - 1;
  minutes);
- the BLT strategy of each buffer count with the least model noise per round
  (`tff_hdp.privacy.blt.optimize`), relative to independent noise, beside
  the binary tree's (plain and efficient estimators) at the same noise
  multiplier;
- for the best BLT, the epsilon of devices capped at fewer participations
  on the same stream (one noise multiplier, calibrated for the
  k-participation devices at --epsilon);
- groups at --group_epsilons, each on its own stream as a run calibrates it:
  the BLT's and the efficient tree's noise multipliers, the epsilon each
  spends, and their model noise per round.

The BLT parameters are written to --output (JSON, keyed by "n,b,k,buffers")
for runs to read; the file in the repository is this command's output:

  .venv/bin/python benchmarks/correlated_noise.py --tf_privacy
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
_NOISE = flags.DEFINE_float('noise_multiplier', 7.0,
                            'z of the tree whose accounting is printed.')
_TREE_DELTA = flags.DEFINE_float('tree_delta', 1e-10,
                                 "Delta of the tree's printed epsilon.")
_TF_PRIVACY = flags.DEFINE_bool(
    'tf_privacy', False, "Also time TF Privacy's tree accountant (minutes; "
    'imports TensorFlow).')
_BUFFERS = flags.DEFINE_list('buffers', ['1', '2', '3'],
                             'Buffer counts to optimize.')
_EPSILON = flags.DEFINE_float('epsilon', 8.0, 'Target of the k-participation '
                              'devices for the capped-devices table.')
_DELTA = flags.DEFINE_float('delta', 1e-6, 'Delta of that table and of '
                             'the groups table.')
_GROUP_EPSILONS = flags.DEFINE_list(
    'group_epsilons', ['1', '8'], 'Targets of the groups table (each group '
    'on its own BLT stream, and on its own efficient tree).')
_OUTPUT = flags.DEFINE_string(
    'output', blt.PARAMETERS_FILE,
    'JSON file the parameters are added to.')

flags.register_validator(
    'buffers', lambda v: all(b.isdigit() and int(b) >= 1 for b in v),
    '--buffers takes positive whole numbers, e.g. --buffers=1,2,3.')
for _name in ('rounds', 'min_separation', 'max_participations'):
  flags.register_validator(_name, lambda v: v >= 1,
                           f'--{_name} must be at least 1.')
for _name in ('delta', 'tree_delta'):
  flags.register_validator(_name, lambda v: 0 < v < 1,
                           f'--{_name} must lie in (0, 1).')
flags.register_validator('noise_multiplier', lambda v: v > 0,
                         '--noise_multiplier must be positive.')
flags.register_validator('epsilon', lambda v: v > 0,
                         '--epsilon must be positive.')
flags.register_validator(
    'group_epsilons',
    lambda v: all(e.replace('.', '', 1).isdigit() and float(e) > 0 for e in v),
    '--group_epsilons takes positive numbers, e.g. --group_epsilons=1,8.')


def _tree_accounting(model: min_separation.MinSeparation) -> None:
  z, delta = _NOISE.value, _TREE_DELTA.value
  start = time.time()
  rho = min_separation.tree_sensitivity_squared(model) / (2 * z * z)
  seconds = time.time() - start
  print(f'The tree at z = {z:g}: rho {rho:.4f} zCDP ({seconds:.1f} s); eps at '
        f'delta {delta:g}: {min_separation.zcdp_epsilon(rho, delta):.4f} (RDP '
        'conversion), '
        f'{min_separation.gaussian_epsilon((2 * rho) ** 0.5, delta):.4f} '
        '(exact Gaussian)', flush=True)
  if _TF_PRIVACY.value:
    # pylint: disable-next=g-import-not-at-top
    from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant
    start = time.time()
    theirs = tree_aggregation_accountant.compute_zcdp_single_tree(
        z, model.rounds, model.max_participations, model.min_separation - 1)
    print(f'TF Privacy: rho {theirs:.4f} zCDP ({time.time() - start:.1f} s)',
          flush=True)


def _groups_table(model, params) -> None:
  """Each group of --group_epsilons on its own stream, as a run calibrates
  it (`DeviceParticipation`): BLT's and the efficient tree's noise
  multipliers, the epsilon each then spends, and the model's noise per round
  (RMSE in clip units over the run's prefixes)."""
  n = model.rounds
  c = params.coefficients(n)
  strategies = {
      'BLT': (min_separation.ToeplitzNoise(tuple(c)),
              blt.prefix_noise_power(c)),
      'tree': (min_separation.TreeNoise(),
               blt.tree_noise_power(model, efficient=True)),
  }
  print(f'Groups, each on its own stream (delta {_DELTA.value:g}):')
  for epsilon in (float(e) for e in _GROUP_EPSILONS.value):
    rmse = {}
    for name, (noise, power) in strategies.items():
      start = time.time()
      stream = min_separation.DeviceParticipation(
          n, 1, model.min_separation, model.max_participations, noise)
      z = stream.calibrate(epsilon, _DELTA.value, n, None)
      spent = stream.epsilon_spent(z, None, n, _DELTA.value)
      rmse[name] = power ** 0.5 * z
      print(f'  eps {epsilon:g}, {name}: z {z:.4f}, spends eps {spent:.8f}, '
            f'model noise RMSE {rmse[name]:.4f} x clip '
            f'({time.time() - start:.1f} s)')
    print(f'  eps {epsilon:g}: BLT RMSE / tree RMSE '
          f'{rmse["BLT"] / rmse["tree"]:.4f}')


def main(argv):
  del argv
  model = min_separation.MinSeparation(
      _ROUNDS.value, _SEPARATION.value, _PARTICIPATIONS.value)
  n = model.rounds
  print(f'n {n}, b {model.min_separation}, k {model.max_participations}.')
  _tree_accounting(model)
  print('Model noise per round relative to independent noise:')
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
  _groups_table(model, best[1])
  with open(_OUTPUT.value, 'w') as f:
    json.dump(stored, f, indent=1, sort_keys=True)
    f.write('\n')
  print(f'Parameters written to {_OUTPUT.value}')


if __name__ == '__main__':
  app.run(main)

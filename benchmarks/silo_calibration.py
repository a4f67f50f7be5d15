"""Time to plan every silo's DP-SGD noise, without and with the calibrations
a cross-silo run keeps on disk (`silo_noise_calibrations.json`), and again
in the same process (its caches).

With --accountant=rdp the first pass calibrates each silo
(`accounting.calibrate_on_orders`: one RDP order at a time); the second,
with every in-memory cache cleared as in a new process, checks the stored
values instead (`accounting.is_calibrated`). Both must give the same noise
multipliers, and (unless --reference=false) the same as dp_accounting's own
search over all its orders (`calibrate_dp_mechanism` at tolerance 1e-10),
timed too. With --accountant=pld (the command line's default) the first
pass is `accounting.calibrate_pld` and the second
`accounting.dp_sgd_pld_holds`; the reference is dp_accounting's
`PLDAccountant` at each silo's z and discretization (at most the target),
and RDP's z for the same silo (to compare the noise).

  .venv/bin/python benchmarks/silo_calibration.py              # School
  .venv/bin/python benchmarks/silo_calibration.py --accountant=rdp
  .venv/bin/python benchmarks/silo_calibration.py --task=vehicle
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from benchmarks import silo_task  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402

_ROUNDS = flags.DEFINE_integer('rounds', 200, 'Rounds the budget must last.')
_EPSILON = flags.DEFINE_float('epsilon', 1.0, "Every silo's epsilon.")
_DELTA = flags.DEFINE_float('delta', 1e-3, "Every silo's delta.")
_ACCOUNTANT = flags.DEFINE_enum('accountant', 'pld', ['pld', 'rdp'],
                                'How each silo\'s epsilon is bounded.')
_DISCRETIZATION = flags.DEFINE_float(
    'pld_discretization', None, 'The PLD\'s discretization (default: per '
    'silo, the coarsest of 1e-3, 1e-4, ... within the tolerance).')
_REFERENCE = flags.DEFINE_bool(
    'reference', True, "Also calibrate each distinct silo with dp_accounting's "
    'calibrate_dp_mechanism over all its orders (minutes) and compare.')


def _reference(plans):
  """(seconds, largest relative difference in z) of dp_accounting's own
  search against `plans`, over their distinct parameters."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting import rdp  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  start, worst = time.perf_counter(), 0.0
  for plan in set(plans):
    sampling = accounting.PoissonSampling(plan.sampling_rate)
    steps = plan.rounds * plan.steps_per_round
    other = (accounting.exponential_mechanism_event(
        plan.selection_epsilon, plan.selection_rounds)
             if plan.selection_rounds else None)
    z = dp_accounting.calibrate_dp_mechanism(
        rdp.RdpAccountant,
        lambda x, s=sampling, t=steps, o=other: accounting.dp_event(x, s, t, o),
        plan.epsilon, plan.delta,
        dp_accounting.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-10)
    worst = max(worst, abs(plan.noise_multiplier - z) / z)
  return time.perf_counter() - start, worst


def _pld_reference(plans):
  """(seconds, largest epsilon over target by dp_accounting's
  PLDAccountant, mean z RDP / z PLD) over `plans`' distinct parameters."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting import pld  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  start, worst, ratios = time.perf_counter(), -math.inf, []
  for plan in set(plans):
    steps = plan.rounds * plan.steps_per_round
    accountant = pld.PLDAccountant(
        value_discretization_interval=plan.accountant.discretization)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            plan.sampling_rate,
            dp_accounting.GaussianDpEvent(plan.noise_multiplier)), steps))
    worst = max(worst, accountant.get_epsilon(plan.delta) / plan.epsilon - 1)
    ratios.append(accounting.calibrate_noise_multiplier(
        plan.epsilon, plan.delta,
        accounting.PoissonSampling(plan.sampling_rate), steps, None) /
                  plan.noise_multiplier)
  return time.perf_counter() - start, worst, sum(ratios) / len(ratios)


def _plan(task, algorithm, settings, path):
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  start, cpu = time.perf_counter(), time.process_time()
  plans = cse.plan_silos(task, algorithm, settings, calibrations=path)
  return plans, (time.perf_counter() - start, time.process_time() - cpu)


def main(argv):
  del argv
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans as plans_lib  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  task, algorithm = silo_task.load()
  settings = cse.CrossSiloSettings(
      rounds=_ROUNDS.value, epsilons=(_EPSILON.value,), delta=_DELTA.value,
      learning_rate=0.1, clip_norm=1.0, accountant=_ACCOUNTANT.value,
      pld_discretization=_DISCRETIZATION.value)
  with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, cse.CALIBRATIONS_FILE)
    first, calibrating = _plan(task, algorithm, settings, path)
    _, cached = _plan(task, algorithm, settings, path)
    for cache in (plans_lib.plan_client_privacy,
                  accounting.calibrate_noise_multiplier,
                  accounting._pld_noise_at,  # pylint: disable=protected-access
                  accounting.pld_epsilon,
                  accounting._subsampled_gaussian_pld):  # pylint: disable=protected-access
      cache.cache_clear()
    second, checking = _plan(task, algorithm, settings, path)
  gap = max(abs(a.noise_multiplier - b.noise_multiplier)
            for a, b in zip(first, second))
  print(f'{task.name}: {len(first)} silos ({len(set(first))} distinct), '
        f'{algorithm.name}, {_ROUNDS.value} rounds, eps {_EPSILON.value:g}, '
        f'delta {_DELTA.value:g}, batch {silo_task.BATCH_SIZE.value}, '
        f'accountant {_ACCOUNTANT.value}, {os.cpu_count()} CPU cores')
  if _ACCOUNTANT.value == 'pld':
    used = sorted({p.accountant.discretization for p in first})
    print('PLD discretizations used:       '
          + ', '.join(f'{d:g}' for d in used))
  print('                                 wall s    CPU s')
  for name, (wall, cpu) in (('calibrating every silo', calibrating),
                            ('checking the stored values', checking),
                            ('again in the same process', cached)):
    print(f'{name + ":":32s}{wall:7.3f}  {cpu:7.3f}')
  print(f'largest difference in z:        {gap:.2e}')
  if _REFERENCE.value and _ACCOUNTANT.value == 'pld':
    seconds, worst, ratio = _pld_reference(first)
    print(f"dp_accounting's PLDAccountant at each z: epsilon at most "
          f'{worst:+.2e} of the target ({seconds:.1f} s)')
    print(f'z (RDP) / z (PLD), mean over distinct silos: {ratio:.4f}')
  elif _REFERENCE.value:
    seconds, worst = _reference(first)
    print(f"dp_accounting's own search:     {seconds:8.1f} s "
          f'({len(set(first))} distinct silos)')
    print(f'largest relative difference in z against it: {worst:.2e}')


if __name__ == '__main__':
  entry.run(main, __doc__)

"""How often the canary audit's alarm fires on correct runs and on runs
whose noise is secretly halved, through the real code of each setting.

Each run is an audit run as the tests make them (every member in every
step, so each canary sees exactly a Gaussian mechanism): trusted server,
one round of 40 digits clients in one private group (eps 4, delta 1e-5)
with `--canaries`; untrusted server and cross-silo, 8 clients (silos) of 10
examples, 2 rounds of one full-batch DP-SGD step, eps from Uniform(1, 10)
(untrusted) or 1-9 (cross-silo). Each run draws its own noise (run i is
seeded by i). A correct run should alarm in at most 5% of runs (the
alarm's confidence, split over the groups or clients it audits); a
half-noise run in every run.

  .venv/bin/python benchmarks/audit_alarm.py --runs=40 --canaries=1000
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
import tff_hdp  # noqa: F401,E402
from tff_hdp.tasks import digits  # noqa: E402
from tff_hdp.tasks import models  # noqa: E402
from tff_hdp.aggregators import heterogeneous_dp  # noqa: E402
from tff_hdp.federated_task import FederatedTask  # noqa: E402
from tff_hdp.learning import dp_sgd  # noqa: E402
from tff_hdp.privacy import accounting  # noqa: E402
from tff_hdp.privacy import plans  # noqa: E402
from tff_hdp.privacy import privacy_groups as pg  # noqa: E402
from tff_hdp.reporting import tables  # noqa: E402
from tff_hdp.simulation import cross_silo_setting  # noqa: E402
from tff_hdp.simulation import runtime  # noqa: E402
from tff_hdp.simulation import trusted_setting  # noqa: E402
from tff_hdp.simulation import untrusted_setting  # noqa: E402
# pylint: enable=g-import-not-at-top,wrong-import-position

_RUNS = flags.DEFINE_integer('runs', 40, 'Runs per setting and noise.')
_CANARIES = flags.DEFINE_integer('canaries', 1000, 'Canaries per group '
                                 '(trusted) or per client.')
_SETTINGS = flags.DEFINE_list('settings', ['trusted', 'untrusted',
                                           'cross_silo'], 'Settings to run.')
_NOISE = flags.DEFINE_list('noise_scales', ['1', '0.5'], 'Fractions of the '
                           'accounted noise the runs add (1: correct).')
DELTA = 1e-5


def _wide_task(clients_per_digit=4):
  base = digits.load(clients_per_digit=clients_per_digit, seed=0)
  return base, lambda: models.one_layer_nn(64, 10, hidden_units=512)


def _trusted(seed: int, canaries: int) -> list[bool]:
  base, model_fn = _wide_task()
  task = FederatedTask('digits_wide', base.client_train, base.client_test,
                       base.server_test, model_fn, base.loss_fn,
                       base.batch_size)
  settings = trusted_setting.Settings(
      rounds=1, sampling=accounting.PoissonSampling(1.0),
      clip=plans.ClipSettings(initial_norm=0.5, learning_rate=0.0),
      eval_every=1, checkpoint_every=0, canaries=canaries, cohort_size=256,
      seed=seed, unsafe_seeded_dp_randomness=True)
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 4.0, DELTA)], 0.0, seed=0)
  summary, _ = trusted_setting.run_configuration(
      task, trusted_setting.Configuration('fedhdp'), choices, settings, None,
      progress=False)
  return [g['audit_alarm'] for g in summary['groups'] if 'audit_alarm' in g]


def _small_task():
  base, model_fn = _wide_task()
  ids = base.client_ids[::5][:8]
  return FederatedTask(
      'digits_wide_small',
      {c: tuple(a[:10] for a in base.train_arrays(c)) for c in ids},
      {c: base.test_arrays(c) for c in ids}, base.server_test, model_fn,
      base.loss_fn, base.batch_size)


def _per_client(setting: str, seed: int, canaries: int) -> list[bool]:
  task = _small_task()
  if setting == 'untrusted':
    settings = untrusted_setting.UntrustedSettings(
        rounds=2, epsilon_distribution='uniform', delta=DELTA,
        learning_rate=0.05, clip_norm=1.0, eval_every=2, checkpoint_every=0,
        canaries=canaries, seed=seed, unsafe_seeded_dp_randomness=True)
    summary = untrusted_setting.run_algorithm(task, 'dpfedavg', settings,
                                              None, progress=False)
  else:
    settings = cross_silo_setting.CrossSiloSettings(
        rounds=2, epsilons=(1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 9.0),
        delta=DELTA, learning_rate=0.05, clip_norm=1.0, eval_every=2,
        checkpoint_every=0, canaries=canaries, seed=seed,
        unsafe_seeded_dp_randomness=True)
    summary = cross_silo_setting.run_algorithm(task, 'fedavg', settings,
                                               None, progress=False)
  return [c['alarm'] for c in summary['empirical_epsilon']['clients']]


def _scaled_noise(scale: float):
  """Makes every setting add `scale` times the noise its ledger accounts
  for (the tests' hook of a broken accountant); returns the undo."""
  factory = heterogeneous_dp.CohortHeterogeneousDPFactory
  original_plan = factory.from_plan.__func__
  original_own = dp_sgd.own_parameters

  def from_plan(cls, plan, clip, seed):
    return original_plan(cls, dataclasses.replace(
        plan, noise_multipliers=tuple(scale * z
                                      for z in plan.noise_multipliers)),
                         clip, seed)

  def own_parameters(privacy, *args, **kwargs):
    own = original_own(privacy, *args, **kwargs)
    own['noise_multiplier'] = np.float32(scale * own['noise_multiplier'])
    return own

  factory.from_plan = classmethod(from_plan)
  dp_sgd.own_parameters = own_parameters

  def undo():
    factory.from_plan = classmethod(original_plan)
    dp_sgd.own_parameters = original_own
  return undo


def main(argv):
  del argv
  runtime.init()
  rows = []
  for scale in (float(s) for s in _NOISE.value):
    undo = _scaled_noise(scale) if scale != 1.0 else (lambda: None)
    try:
      for setting in _SETTINGS.value:
        start, alarmed, audits, fired = time.time(), 0, 0, 0
        for seed in range(_RUNS.value):
          alarms = (_trusted(seed, _CANARIES.value) if setting == 'trusted'
                    else _per_client(setting, seed, _CANARIES.value))
          alarmed += any(alarms)
          audits += len(alarms)
          fired += sum(alarms)
        rows.append([setting, f'{scale:g}', _RUNS.value,
                     f'{alarmed} ({alarmed / _RUNS.value:.1%})',
                     f'{fired} of {audits}',
                     f'{time.time() - start:.0f}'])
        print(tables.markdown_table(
            ['setting', 'noise scale', 'runs', 'runs with an alarm',
             'audits alarmed', 'seconds'], rows[-1:]), flush=True)
    finally:
      undo()
  print(f'\n{_CANARIES.value} canaries per group (trusted) or per client; '
        'noise scale 1 is a correct run.\n')
  print(tables.markdown_table(
      ['setting', 'noise scale', 'runs', 'runs with an alarm',
       'audits alarmed', 'seconds'], rows))
  runtime.stop_workers()


if __name__ == '__main__':
  app.run(main)

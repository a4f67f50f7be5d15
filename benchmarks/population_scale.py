"""FedHDP at cross-device scale: a ClientData population of 10^4 to 10^6.

The `population` task (tasks/population.py: an SqlClientData file of N
clients, 5-20 training examples of 20 features each, cached by (N, seed))
trains FedHDP with Poisson sampling of --clients_per_round expected clients
a round: one private level and an opt-out group. Each N runs in its own
process, so its peak resident sets (that process's, holding the data, and
its TFF worker's, from getrusage) are its own. Per N the table gives the
seconds to write the file (0 when cached), to load the task (client ids,
the file's hash), to assign the clients' privacy choices (opt-out draw over
N ids), the median seconds per round after
--warmup rounds, the final evaluation (the server test set and a seeded
subset of clients), the two peak RSS and each group's epsilon spent.

  .venv/bin/python benchmarks/population_scale.py
  .venv/bin/python benchmarks/population_scale.py --num_clients=10000 --rounds=3
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.tasks import population  # noqa: E402
from tff_hdp.privacy import accounting, plans  # noqa: E402
from tff_hdp.privacy import privacy_groups as pg  # noqa: E402
from tff_hdp.simulation import runtime, trusted_setting  # noqa: E402

_NUM_CLIENTS = flags.DEFINE_list('num_clients', ['10000', '100000', '1000000'],
                                 'Populations to measure.')
_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', 100, 'Expected clients a round (Poisson, q = m/N).')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Measured rounds per N.')
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Unmeasured rounds per N.')
_SEED = flags.DEFINE_integer('seed', 0, 'Population and run seed.')
_COHORT_SIZE = flags.DEFINE_integer(
    'cohort_size', 50, 'Clients per TFF client (tff_hdp.learning.cohort); '
    '0: one TFF client per client.')
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None, 'Where population files are cached (default: '
    '$TFF_HDP_CACHE or <tmp>/tff_hdp_cache).')
_ONE = flags.DEFINE_integer('one', None, 'Internal: measure this N alone and '
                            'print it as JSON.')
_EPSILON, _DELTA, _OPT_OUT = 3.0, 1e-8, 0.05


def _measure(n: int) -> dict:
  """One N, in this process: the row of the table."""
  runtime.init()
  row = {'N': n}
  start = time.perf_counter()
  path = population.cached_file(n, _SEED.value, _CACHE_DIR.value)
  row['write_s'] = time.perf_counter() - start
  row['file_MB'] = os.path.getsize(path) / 2**20
  start = time.perf_counter()
  task = population.load(n, _SEED.value, folder=_CACHE_DIR.value)
  row['load_s'] = time.perf_counter() - start
  start = time.perf_counter()
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', _EPSILON, _DELTA)], _OPT_OUT, _SEED.value)
  row['assign_s'] = time.perf_counter() - start
  rounds = _WARMUP.value + _ROUNDS.value
  settings = trusted_setting.Settings(
      rounds=rounds,
      sampling=accounting.PoissonSampling(_CLIENTS_PER_ROUND.value / n),
      clip=plans.ClipSettings(initial_norm=0.5), eval_every=rounds,
      seed=_SEED.value, cohort_size=_COHORT_SIZE.value)
  times = [time.perf_counter()]

  def on_round(round_num, weights):
    del round_num, weights
    times.append(time.perf_counter())

  start = time.perf_counter()
  summary, _ = trusted_setting.run_configuration(
      task, trusted_setting.Configuration('fedhdp', 0.5), choices, settings,
      None, progress=False, on_round=on_round)
  total = time.perf_counter() - start
  per_round = [b - a for a, b in zip(times, times[1:])]
  row['round_s'] = statistics.median(per_round[_WARMUP.value:])
  # The last round's callback comes after its evaluation: the difference
  # from the median round is the evaluation, roughly.
  row['eval_s'] = max(per_round[-1] - row['round_s'], 0.0)
  row['run_s'] = total
  runtime.stop_workers()  # reaped, so its peak is in RUSAGE_CHILDREN
  row['peak_rss_MB'] = (
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10)
  row['worker_rss_MB'] = (
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**10)
  row['epsilon'] = {g['name']: g['epsilon_spent'] for g in summary['groups']}
  row['clients'] = {g['name']: g['clients'] for g in summary['groups']}
  row['z'] = {g['name']: g['noise_multiplier'] for g in summary['groups']}
  row['acc_g'] = summary['metrics'].get('acc_g')
  return row


def main(argv):
  del argv
  if _ONE.value is not None:
    print(json.dumps(_measure(_ONE.value)))
    return
  print(f'FedHDP r=0.5, Poisson q = {_CLIENTS_PER_ROUND.value}/N, one private '
        f'level (epsilon {_EPSILON}, delta {_DELTA}) and {_OPT_OUT:.0%} '
        f'opt-out; cohorts of {_COHORT_SIZE.value} (0: per client); median of '
        f'{_ROUNDS.value} rounds after {_WARMUP.value}.')
  print(f'{"N":>9} {"file MB":>8} {"write s":>8} {"load s":>7} '
        f'{"assign s":>8} {"s/round":>8} {"eval s":>7} {"RSS MB":>7} '
        f'{"worker MB":>9}   epsilon per group (clients, noise multiplier '
        'z: smaller at larger N, the amplification by sampling)')
  for n in _NUM_CLIENTS.value:
    command = [sys.executable, os.path.abspath(__file__), f'--one={n}',
               f'--clients_per_round={_CLIENTS_PER_ROUND.value}',
               f'--rounds={_ROUNDS.value}', f'--warmup={_WARMUP.value}',
               f'--seed={_SEED.value}', f'--cohort_size={_COHORT_SIZE.value}']
    if _CACHE_DIR.value:
      command.append(f'--cache_dir={_CACHE_DIR.value}')
    done = subprocess.run(command, capture_output=True, text=True,
                          check=False)
    if done.returncode:
      sys.exit(f'N={n} failed:\n{done.stderr[-3000:]}')
    row = json.loads(done.stdout.strip().splitlines()[-1])
    groups = ', '.join(
        f'{g} {e:.3g} ({row["clients"][g]}' + (
            f', z {row["z"][g]:.3g})' if row['z'][g] else ')')
        for g, e in row['epsilon'].items())
    print(f'{row["N"]:>9} {row["file_MB"]:>8.0f} {row["write_s"]:>8.1f} '
          f'{row["load_s"]:>7.1f} {row["assign_s"]:>8.2f} '
          f'{row["round_s"]:>8.2f} {row["eval_s"]:>7.1f} '
          f'{row["peak_rss_MB"]:>7.0f} {row["worker_rss_MB"]:>9.0f}   '
          f'{groups}', flush=True)


if __name__ == '__main__':
  app.run(main)

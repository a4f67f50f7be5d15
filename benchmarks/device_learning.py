"""Learning without a sampling assumption: per-group correlated noise on a
cross-device population (the learning table of the correlated-noise rules).

Two privacy groups (0.3 of the devices at eps 1, 0.7 at eps 8, delta 1e-6,
no opt-out) on the `population` task (--num_clients devices,
--clients_per_round a round), one run per configuration, every one at the
fixed clip (`--clip_lr=0`) and the noise-aware ratios, so that what differs
is the noise:

  per_group_blt    `fedhdp_blt`: each group its own BLT stream, devices
                   every --min_separation rounds at most
                   --max_participations times (`--sampling=device`);
  homogeneous_blt  `fedhdp_blt` with every device at eps 1 (one stream);
  per_group_tree   `fedhdp_tree`: each group TFF's efficient tree, same
                   participation;
  poisson_fedhdp   `fedhdp` with Poisson sampling (q = clients_per_round /
                   num_clients), fresh noise, amplification accounted;
  per_group_blt_audit  per_group_blt with --canaries canary devices per
                   group: each group's canary estimate beside its epsilon
                   (its accuracy is not the rule's: it trains with them);
  nonprivate       the same schedule without noise: the ceiling.

Each configuration runs `run_experiment.py` into --output_dir/<name> with
checkpoints, so the same command resumes what a stopped one left (a
finished run is read, not repeated). The table gives each configuration's
Acc_g (the global model on the server's test set), each group's epsilon
spent against its target, the audit's estimates (final model / every
round's) and the wall time of the rounds it ran here. --task=
fashion_mnist_iid splits Fashion-MNIST (from the data sets' setting) into
--num_clients IID clients instead.

  .venv/bin/python benchmarks/device_learning.py
  .venv/bin/python benchmarks/device_learning.py --configs=per_group_tree
  .venv/bin/python benchmarks/device_learning.py --task=fashion_mnist_iid \
    --num_clients=6000 --clients_per_round=100 \
    --output_dir=results/device_learning_fashion
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tff_hdp.cli import entry  # noqa: E402

_OUTPUT = flags.DEFINE_string('output_dir', os.path.join(
    ROOT, 'results', 'device_learning'), 'Where each configuration runs.')
_TASK = flags.DEFINE_enum('task', 'population',
                          ['population', 'fashion_mnist_iid'], 'The task.')
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 100_000, 'Population N.')
_PER_ROUND = flags.DEFINE_integer('clients_per_round', 1000,
                                  'Devices a round (Poisson: expected).')
_ROUNDS = flags.DEFINE_integer('rounds', 200, 'Rounds n.')
_SEPARATION = flags.DEFINE_integer('min_separation', 50,
                                   'Rounds b between two of a device.')
_PARTICIPATIONS = flags.DEFINE_integer('max_participations', 4,
                                       'Participations k a device allows.')
_COHORT = flags.DEFINE_integer('cohort_size', 50, 'Devices per TFF client.')
_EVAL_EVERY = flags.DEFINE_integer('eval_every', 50, 'Rounds between '
                                   'evaluations.')
_SEED = flags.DEFINE_integer('seed', 0, 'Population and run seed.')
_CANARIES = flags.DEFINE_integer(
    'canaries', 50, 'Canary devices per group of per_group_blt_audit (the '
    'population model holds at most 64 a group, inserted and unseen).')

_TWO_GROUPS = ('--epsilons=1,8', '--level_fractions=0.3,0.7')
_DEVICE = ('--sampling=device',)
CONFIGS = {
    'per_group_blt': ('fedhdp_blt', _TWO_GROUPS + _DEVICE),
    'homogeneous_blt': ('fedhdp_blt', ('--epsilons=1',) + _DEVICE),
    'per_group_tree': ('fedhdp_tree', _TWO_GROUPS + _DEVICE),
    'poisson_fedhdp': ('fedhdp', _TWO_GROUPS + ('--sampling=poisson',)),
    'per_group_blt_audit': ('fedhdp_blt', _TWO_GROUPS + _DEVICE),
    'nonprivate': ('nonprivate', _TWO_GROUPS + _DEVICE),
}
_CONFIGS = flags.DEFINE_list('configs', list(CONFIGS), 'Configurations to '
                             f'run and tabulate: any of {", ".join(CONFIGS)}.')
_GROUPS = ('private_eps1', 'private_eps8')


def _command(name: str) -> list[str]:
  algorithm, extra = CONFIGS[name]
  command = [
      sys.executable, os.path.join(ROOT, 'run_experiment.py'),
      f'--task={_TASK.value}', f'--num_clients={_NUM_CLIENTS.value}',
      f'--algorithms={algorithm}', '--deltas=1e-6', '--opt_out_fraction=0',
      f'--rounds={_ROUNDS.value}', f'--clients_per_round={_PER_ROUND.value}',
      '--clip_lr=0', f'--eval_every={_EVAL_EVERY.value}',
      f'--cohort_size={_COHORT.value}', '--checkpoint_every=10',
      f'--seed={_SEED.value}', f'--output_dir={_OUTPUT.value}/{name}',
      *extra]
  if name.endswith('_audit'):
    command.append(f'--canaries={_CANARIES.value}')
  if '--sampling=device' in extra:
    command += [f'--min_separation={_SEPARATION.value}',
                f'--max_participations={_PARTICIPATIONS.value}']
  return command


def _estimates(name: str, group: str) -> str:
  """The audit's estimates of `group` (final model / every round's), '-'
  without canaries."""
  path = os.path.join(_OUTPUT.value, name, CONFIGS[name][0], 'summary.json')
  if not os.path.exists(path):
    return '-'
  with open(path) as f:
    groups = {g['name']: g for g in json.load(f)['groups']}
  scores = (groups.get(group) or {}).get('empirical_epsilon')
  if not scores:
    return '-'
  return (f"{scores['final_model']['estimate']:.2f} / "
          f"{scores['all_rounds']['estimate']:.2f}")


def _row(name: str) -> dict[str, str] | None:
  path = os.path.join(_OUTPUT.value, name, 'results.csv')
  if not os.path.exists(path):
    return None
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  return rows[0] if rows else None


def _cell(row: dict[str, str], column: str, digits: int = 2) -> str:
  value = row.get(column, '')
  return f'{float(value):.{digits}f}' if value not in ('', None) else '-'


def _validate():
  unknown = sorted(set(_CONFIGS.value) - set(CONFIGS))
  if unknown:
    raise entry.InputError(f'--configs: unknown {", ".join(unknown)}; any of '
                           f'{", ".join(CONFIGS)}.')


def main(argv):
  del argv
  seconds = {}
  for name in _CONFIGS.value:
    if _row(name) is not None:
      print(f'{name}: finished, read from {_OUTPUT.value}/{name}', flush=True)
      continue
    print(f'{name}: {" ".join(_command(name)[1:])}', flush=True)
    start = time.time()
    done = subprocess.run(_command(name), cwd=ROOT)
    seconds[name] = time.time() - start
    if done.returncode != 0:
      raise SystemExit(f'{name} exited with {done.returncode}')
  header = ['configuration', 'rule', 'Acc_g',
            *(f'eps spent/target {g}' for g in _GROUPS),
            *(f'canary estimate {g}' for g in _GROUPS), 'seconds here']
  print('| ' + ' | '.join(header) + ' |')
  print('|' + '---|' * len(header))
  for name in _CONFIGS.value:
    row = _row(name)
    # An audit run trains with its canaries: its accuracy is not the rule's.
    cells = [name, CONFIGS[name][0], 'not quoted (canaries)'
             if name.endswith('_audit') else _cell(row, 'acc_g')]
    cells += [f'{_cell(row, f"epsilon_spent_{g}", 4)}/'
              f'{_cell(row, f"target_epsilon_{g}", 4)}' for g in _GROUPS]
    cells += [_estimates(name, g) for g in _GROUPS]
    cells.append(f'{seconds[name]:.0f}' if name in seconds else '-')
    print('| ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
  # Each configuration's run holds its own folder; two invocations with
  # other --configs may share --output_dir.
  entry.run(main, __doc__, validate=_validate, share_output_dir=True)

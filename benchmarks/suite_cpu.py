"""The CPU time each test costs, per file and per test, with every process it
starts.

`pytest --durations` gives wall seconds, and on 2 cores a test's wall time
is as much its neighbour's load as its own; it also misses what a test costs
in processes it starts (a run, TFF workers) and in the test process's local
TFF worker. Here each test's CPU seconds are those of the test process, of
every descendant process alive at its start or end (TFF workers, the
processes of a run, their own reaped children) and of the children reaped
during it, so the suite's CPU adds up across the files that spend it. The
suite runs as `make test` runs it (pytest-xdist, `--dist loadgroup`); a
process shared by several tests (a module's TFF workers) is counted in the
tests during which it computes.

  .venv/bin/python benchmarks/suite_cpu.py
  .venv/bin/python benchmarks/suite_cpu.py --tests=tests/simulation --top=10
"""

from __future__ import annotations

import collections
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import flags
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import process_cpu  # noqa: E402
from tff_hdp.cli import entry  # noqa: E402

_TESTS = flags.DEFINE_list('tests', ['tests'], 'pytest paths to run.')
_PROCESSES = flags.DEFINE_integer('processes', 2, 'pytest-xdist processes '
                                  '(-n), as `make test` runs.')
_TOP = flags.DEFINE_integer('top', 25, 'Tests listed, by CPU seconds.')
_OUTPUT = flags.DEFINE_string('output', None, 'CSV of every test (test, '
                              'wall, cpu, own, descendants), if given.')

_RECORD_ENV = 'SUITE_CPU_RECORD'  # the pytest plugin's JSON-lines file


def _descendants_cpu() -> dict[int, float]:
  """CPU seconds of each live descendant of this process: its own and its
  reaped children's (which are in no other live process's count)."""
  table = process_cpu.live_processes()
  mine, frontier = {}, [os.getpid()]
  while frontier:
    parent = frontier.pop()
    for pid, (ppid, _, cpu) in table.items():
      if ppid == parent and pid not in mine:
        mine[pid] = cpu
        frontier.append(pid)
  return mine


def _snapshot():
  own = resource.getrusage(resource.RUSAGE_SELF)
  reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
  return (own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime,
          _descendants_cpu())


def _spent(before, after) -> tuple[float, float]:
  """(own, descendants) CPU seconds between two snapshots. A descendant that
  ended in between is in a reaped count with all it ever spent: the part
  spent before is taken off."""
  own = after[0] - before[0]
  live_before, live_after = before[2], after[2]
  descendants = after[1] - before[1]
  descendants += sum(v - live_before.get(p, 0.0) for p, v in live_after.items())
  descendants -= sum(v for p, v in live_before.items() if p not in live_after)
  return own, max(0.0, descendants)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """The pytest plugin (`-p suite_cpu`, this folder on the path)."""
  del nextitem
  before, start = _snapshot(), time.monotonic()
  yield
  own, descendants = _spent(before, _snapshot())
  with open(os.environ[_RECORD_ENV], 'a') as f:
    f.write(json.dumps({'test': item.nodeid,
                        'wall': time.monotonic() - start, 'own': own,
                        'descendants': descendants}) + '\n')


def _table(rows: list[dict]) -> None:
  by_file = collections.defaultdict(lambda: [0.0, 0, 0.0, 0.0, 0.0])
  for r in rows:
    per_file = by_file[r['test'].split('::')[0]]
    per_file[0] += r['cpu']
    per_file[1] += 1
    per_file[2] += r['own']
    per_file[3] += r['descendants']
    per_file[4] += r['wall']
  total = sum(r['cpu'] for r in rows)
  print(f'{len(rows)} tests, {total:.0f} CPU s in all '
        f'({sum(r["own"] for r in rows):.0f} in the test processes, '
        f'{sum(r["descendants"] for r in rows):.0f} in processes they '
        'started)')
  print()
  print('| file | tests | CPU s | share | test process | started | wall s |')
  print('|---|---|---|---|---|---|---|')
  for name, (cpu, n, own, started, wall) in sorted(
      by_file.items(), key=lambda kv: -kv[1][0]):
    if cpu < 0.01 * total:
      continue
    print(f'| {name} | {n} | {cpu:.1f} | {100 * cpu / total:.1f}% | '
          f'{own:.1f} | {started:.1f} | {wall:.1f} |')
  print('(files under 1% of the CPU not listed)')
  print()
  print('| CPU s | wall s | test |')
  print('|---|---|---|')
  for r in sorted(rows, key=lambda r: -r['cpu'])[:_TOP.value]:
    print(f'| {r["cpu"]:.1f} | {r["wall"]:.1f} | {r["test"]} |')


def main(argv):
  del argv
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  record = tempfile.NamedTemporaryFile(suffix='.jsonl', delete=False).name
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.dirname(os.path.abspath(__file__))] +
      [p for p in [os.environ.get('PYTHONPATH')] if p]))
  env[_RECORD_ENV] = record
  command = [sys.executable, '-m', 'pytest', '-q', '-rf', '-p', 'suite_cpu',
             '-n', str(_PROCESSES.value), '--dist', 'loadgroup',
             *_TESTS.value]
  print(' '.join(command[1:]), flush=True)
  try:
    result = subprocess.run(command, cwd=root, env=env,
                            stdout=subprocess.PIPE, text=True)
    with open(record) as f:
      rows = [json.loads(line) for line in f]
  finally:
    os.remove(record)
  for r in rows:
    r['cpu'] = r['own'] + r['descendants']
  lines = result.stdout.strip().splitlines()
  for line in lines:
    if line.startswith('FAILED '):
      print(line[:300])
  print(f'pytest: {lines[-1] if lines else "no output"} (exit status '
        f'{result.returncode}); load average at the end '
        f'{os.getloadavg()[0]:.2f}')
  print()
  _table(rows)
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w', newline='') as f:
      writer = csv.DictWriter(f, ['test', 'wall', 'cpu', 'own',
                                  'descendants'])
      writer.writeheader()
      for r in rows:
        writer.writerow({k: r[k] for k in writer.fieldnames})


if __name__ == '__main__':
  entry.run(main, __doc__, [('suite_cpu.py', [
      'tests', 'processes', 'top', 'output'])], needs_tensorflow=False)

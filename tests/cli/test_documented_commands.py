"""Every command the documentation shows is accepted as written.

The commands are read from the shell blocks of README.md and RESULTS.md and
from the usage examples in the docstrings of the programs run_experiment.py,
reproduce.py and run_worker.py (in cli/, which the top-level scripts call). Each is checked the way its program checks flags:

* run_experiment.py and reproduce.py with `--dry_run`, which runs every flag
  check (for reproduce.py with each preset applied) and exits before loading
  data or TensorFlow;
* run_worker.py and the benchmarks through their own start
  (`tff_hdp.cli.entry.run`: flag parsing and the program's checks) with a main that
  does nothing and without the import of TensorFlow that follows the checks
  (a benchmark whose own imports need it still imports it).

A documented command that is refused (exit status not 0) fails the test.
Placeholders the documents use for values a reader picks (EMNIST_DIR, RULE,
S, LR, ...) are replaced by one valid value each (`PLACEHOLDERS`).

Benchmark commands are checked where README.md and RESULTS.md show them; the
usage lines inside the benchmarks' own docstrings are not, since every check
of a benchmark is a process of its own (seconds each; TensorFlow too where
the benchmark's imports need it);
tests/cli/test_bad_input.py checks that each benchmark parses its flags.

`SMOKE` names the documented commands that also run for one round (into a
temporary folder) where their data is present, about a minute each on two
busy cores: the papers' non-IID MNIST preset as README documents it (a
command that was once refused) and the untrusted-server MNIST command of
RESULTS.md. The others are only flag-checked, to keep this test near three
minutes: digits runs throughout tests/cli, Vehicle's cross-silo runs in
tests/test_pinned_outputs.py, and School's 139 silos take minutes to
calibrate.
"""

import ast
import os
import re
import shlex
import subprocess
import sys

import pytest

from tff_hdp import tasks
from tests import repository

ROOT = repository.ROOT
DOCUMENTS = ('README.md', 'RESULTS.md')
ENTRY_POINTS = ('run_experiment.py', 'reproduce.py', 'run_worker.py')
# Programs run with --dry_run; any other is stopped after its flag checks.
DRY_RUN_PROGRAMS = ('run_experiment.py', 'reproduce.py')
DATA_ROOT = tasks.data_root()
PLACEHOLDERS = {
    'EMNIST_DIR': os.path.join(DATA_ROOT, 'emnist'),
    'DIR': os.path.join(DATA_ROOT, 'emnist'),  # reproduce.py's femnist line
    'RULE': 'robust_hdp',
    'S': '0',
    'LR': '0.1',
}
# Commands (by a fragment of their text) that also train for one round.
SMOKE = (
    'reproduce.py --presets=mnist_noniid --data_dir=../shared/data/mnist '
    '--r=0.01,0.1,1 --ditto_lambdas= --cohort_size=64',
    'run_experiment.py --task=mnist_iid',
)
# Runs a program's start (`cli.entry.run`: its flag parsing and checks) with
# a main that does nothing; TensorFlow, imported only after every check,
# is not (seconds of each check).
_CHECK_ONLY = '''
import runpy, sys
sys.path.insert(0, {root!r})
from tff_hdp.cli import entry
real_run = entry.run
def check_only(main, usage, groups=None, validate=None, **options):
  real_run(lambda argv: None, usage, groups, validate,
           **dict(options, needs_tensorflow=False))
entry.run = check_only
from absl import app, flags
def parse_only(main, argv=None, **unused):  # a benchmark on absl's app.run
  flags.FLAGS(sys.argv)
app.run = parse_only
sys.argv = {argv!r}
runpy.run_path(sys.argv[0], run_name='__main__')
'''


def _shell_blocks(text):
  return re.findall(r'^```(?:sh|bash)\n(.*?)^```', text, re.S | re.M)


def _expand(block):
  """The python commands of a shell block, variables and loops expanded
  (a loop's first value stands for all)."""
  variables, commands = {}, []
  for line in block.replace('\\\n', '').splitlines():
    line = line.split(' #')[0].strip()
    if not line or line.startswith('#') or line == 'done':
      continue
    loop = re.fullmatch(r'for (\w+) in (\S+).*; do', line)
    assignment = re.fullmatch(r'(\w+)="(.*)"', line)
    if loop:
      variables[loop.group(1)] = loop.group(2)
    elif assignment:
      variables[assignment.group(1)] = assignment.group(2)
    elif 'python' in line.split()[0]:
      def value(match):
        assert match.group(1) in variables, f'unset ${match.group(1)}: {line}'
        return variables[match.group(1)]
      commands.append(' '.join(re.sub(r'\$(\w+)', value, line).split()))
  return commands


def _docstring_commands(path):
  """Usage lines `python program.py ...` of a module docstring, with their
  indented `--flag` continuation lines."""
  with open(path) as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ''
  commands, current = [], None
  for line in doc.splitlines():
    words = line.strip()
    if words.startswith(('python ', '.venv/bin/python ')):
      current = [words]
      commands.append(current)
    elif current is not None and words.startswith('--'):
      current.append(words)
    else:
      current = None
  return [' '.join(c).replace('\\', ' ').split(' #')[0].rstrip(' &')
          for c in commands]


def documented_commands():
  found = []
  for name in DOCUMENTS:
    with open(os.path.join(ROOT, name)) as f:
      for block in _shell_blocks(f.read()):
        found += [(name, c) for c in _expand(block)]
  for name in ENTRY_POINTS:
    found += [(name, c)
              for c in _docstring_commands(os.path.join(ROOT, 'cli', name))]
  return found


COMMANDS = documented_commands()


def _argv(command):
  """(program, flags) with placeholders replaced."""
  words = shlex.split(command)
  program = words[1]
  flags = []
  for word in words[2:]:
    name, eq, value = word.partition('=')
    if eq and value in PLACEHOLDERS:
      value = PLACEHOLDERS[value]
    flags.append(f'{name}{eq}{value}')
  return program, flags


def test_the_documents_show_the_commands():
  programs = {_argv(c)[0] for _, c in COMMANDS}
  assert {'run_experiment.py', 'reproduce.py', 'run_worker.py',
          'benchmarks/paper_claims.py'} <= programs
  assert len(COMMANDS) >= 30
  for fragment in SMOKE:
    assert sum(fragment in c for _, c in COMMANDS) >= 1, fragment


@pytest.mark.parametrize('source,command', [
    # Only the --dry_run of run_experiment.py and reproduce.py is sure to
    # check its flags without importing TensorFlow.
    (s, c) if _argv(c)[0] in DRY_RUN_PROGRAMS else pytest.param(
        s, c, marks=pytest.mark.tf) for s, c in COMMANDS],
                         ids=[f'{s}: {c[:90]}' for s, c in COMMANDS])
def test_documented_command_is_accepted(source, command):
  program, flags = _argv(command)
  if program in DRY_RUN_PROGRAMS:  # in this process: checks, no training
    result = repository.run_program(program, *flags, '--dry_run')
  else:  # other programs define flags of their own: a process each
    result = subprocess.run(
        [sys.executable, '-c',
         _CHECK_ONLY.format(root=ROOT, argv=[program, *flags])], cwd=ROOT,
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, MPLBACKEND='Agg'))
  assert result.returncode == 0, (source, command, result.stderr[-2000:])
  if program in DRY_RUN_PROGRAMS:
    assert '--dry_run: ' in result.stdout


SMOKE_COMMANDS = [c for _, c in COMMANDS if any(s in c for s in SMOKE)]


@pytest.mark.tf
@pytest.mark.parametrize('command', SMOKE_COMMANDS,
                         ids=[c[:90] for c in SMOKE_COMMANDS])
def test_documented_command_trains_one_round(command, tmp_path):
  program, flags = _argv(command)
  flags = [f.replace('../shared/data', DATA_ROOT) for f in flags]
  for flag in flags:
    if flag.startswith('--data_dir=') and not os.path.isdir(
        flag.partition('=')[2]):
      pytest.skip(f'{repository.MISSING_DATA}: {flag}')
  # In this process: what the command trains and writes is the claim.
  result = repository.run_program(program, *flags, '--rounds=1',
                                  f'--output_dir={tmp_path}')
  assert result.returncode == 0, (command, result.stderr[-3000:])
  assert '| ' in result.stdout  # the results table
  assert os.path.exists(os.path.join(tmp_path, 'results.csv')) or any(
      os.path.exists(os.path.join(tmp_path, d, 'results.csv'))
      for d in os.listdir(tmp_path))

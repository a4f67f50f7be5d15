"""BUILD's targets have every Python file of the project as a source, each
exactly once, and nothing else: a new module in a layer's folder is in its
library by its glob; a file outside every pattern, or a pattern or name that
finds nothing, fails here."""

import collections
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('tff_hdp', 'tasks', 'cli', 'tests', 'benchmarks', 'examples')
# glob([patterns]) or glob([patterns], exclude = [patterns]), as Bazel reads it.
_GLOB = re.compile(r'glob\(\s*\[([^\]]*)\]\s*(?:,\s*exclude\s*=\s*\[([^\]]*)\]'
                   r'\s*)?,?\s*\)')
_NAME = re.compile(r'"([\w/.*]+\.py)"')


def _python_files():
  found = set()
  for package in PACKAGES:
    for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
      for name in files:
        if name.endswith('.py'):
          found.add(os.path.relpath(os.path.join(dirpath, name), ROOT))
  for name in os.listdir(ROOT):
    if name.endswith('.py'):
      found.add(name)
  return found


def _expand(pattern):
  return {os.path.relpath(p, ROOT) for p in glob.glob(
      os.path.join(ROOT, pattern), recursive=True)}


def _sources(build):
  """Each source file of BUILD's targets, with how many targets name it;
  and the patterns or names that find no file."""
  counts, empty = collections.Counter(), []
  for match in _GLOB.finditer(build):
    files = set()
    for pattern in _NAME.findall(match.group(1)):
      found = _expand(pattern)
      empty += [] if found else [pattern]
      files |= found
    for pattern in _NAME.findall(match.group(2) or ''):
      found = _expand(pattern)
      empty += [] if found else [pattern]
      files -= found
    counts.update(files)
  for name in _NAME.findall(_GLOB.sub('', build)):
    empty += [] if os.path.exists(os.path.join(ROOT, name)) else [name]
    counts[name] += 1
  return counts, empty


def test_every_python_file_is_the_source_of_exactly_one_target():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    counts, empty = _sources(f.read())
  files = _python_files()
  assert files - set(counts) == set(), 'missing from BUILD'
  assert set(counts) - files == set(), 'in BUILD but no project file'
  assert {f: n for f, n in counts.items() if n > 1} == {}, 'in two targets'
  assert empty == [], 'finds no file'


def test_a_file_outside_every_pattern_or_in_two_is_found():
  """The check itself: against a BUILD text that misses or repeats files."""
  counts, empty = _sources('srcs = glob(["cli/*.py"], exclude = '
                           '["cli/flags.py"]), "cli/flags.py", '
                           '"cli/flags.py", glob(["nowhere/*.py"])')
  assert counts['cli/flags.py'] == 2
  assert counts['cli/trusted.py'] == 1
  assert 'tasks/mnist.py' not in counts
  assert empty == ['nowhere/*.py']

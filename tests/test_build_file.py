"""BUILD lists exactly the project's Python files."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('tff_hdp', 'tasks', 'cli', 'tests', 'benchmarks')


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


def test_every_module_and_test_is_a_build_source_and_nothing_else():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    listed = set(re.findall(r'"([\w/]+\.py)"', f.read()))
  files = _python_files()
  assert files - listed == set(), 'missing from BUILD'
  assert listed - files == set(), 'listed in BUILD but absent'

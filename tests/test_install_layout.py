"""What `pip install` of the project puts into an environment: every package
of the tree under the project's own name, nothing at the top level beside
`tff_hdp` (pyproject.toml), and commands that name real functions."""

import ast
import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as _f:
  PYPROJECT = tomllib.load(_f)
SETUPTOOLS = PYPROJECT['tool']['setuptools']


def _folder_of(package: str) -> str:
  """The tree's folder that `package` installs from (package-dir)."""
  mapped = SETUPTOOLS.get('package-dir', {})
  for name in sorted(mapped, key=len, reverse=True):
    if package == name or package.startswith(name + '.'):
      return os.path.join(mapped[name], *package[len(name):].split('.')[1:])
  return os.path.join(*package.split('.'))


def test_every_package_of_the_tree_installs_under_tff_hdp():
  in_tree = set()
  for top, name in (('tff_hdp', 'tff_hdp'), ('tasks', 'tff_hdp.tasks'),
                    ('cli', 'tff_hdp.cli')):
    for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
      if '__init__.py' in files:
        rel = os.path.relpath(dirpath, os.path.join(ROOT, top))
        in_tree.add(name if rel == '.' else
                    f'{name}.{rel.replace(os.sep, ".")}')
  assert set(SETUPTOOLS['packages']) == in_tree
  assert {p.split('.')[0] for p in SETUPTOOLS['packages']} == {'tff_hdp'}
  assert 'py-modules' not in SETUPTOOLS  # no top-level modules either
  for package in SETUPTOOLS['packages']:
    assert os.path.isfile(os.path.join(ROOT, _folder_of(package),
                                       '__init__.py')), package


def test_each_command_names_a_function_of_an_installed_module():
  for command, target in PYPROJECT['project']['scripts'].items():
    module, _, function = target.partition(':')
    package, _, name = module.rpartition('.')
    assert package in SETUPTOOLS['packages'], command
    path = os.path.join(ROOT, _folder_of(package), f'{name}.py')
    with open(path) as f:
      tree = ast.parse(f.read())
    assert function in {node.name for node in tree.body
                        if isinstance(node, ast.FunctionDef)}, command

"""Each layer imports only the layers below it (../shared/DESIGN.md).

The order, lowest first: the package root (`tff_hdp`, `federated_task`,
`metrics`), `privacy` (pure Python: no TensorFlow, no TFF), `aggregators`,
`learning`, `simulation`, `estimation`, `reporting`, `cli`. `tasks/` holds
registered tasks only: it imports the package root and nothing else of the
library, and only `cli/` (and the entry points) import it. Imports inside
functions count too. `tasks/` and `cli/` sit at the top of the tree and are
imported by their installed names, `tff_hdp.tasks` and `tff_hdp.cli`
(pyproject.toml); their bare names would load a second copy of each module.
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ('root', 'privacy', 'aggregators', 'learning', 'simulation',
         'estimation', 'reporting', 'cli')
NO_TENSORFLOW = ('privacy',)


TOP_FOLDERS = ('tasks', 'cli')  # installed as tff_hdp.<name>


def layer_of(module: str) -> str | None:
  """The layer of a dotted module name, or None outside the project."""
  parts = module.split('.')
  if parts[0] != 'tff_hdp':
    return None
  if len(parts) > 1 and (parts[1] in ORDER or parts[1] in TOP_FOLDERS):
    return parts[1]
  return 'root'


def _module_files(root: str):
  """(path, module name, its package) of every module under tff_hdp/,
  tasks/ and cli/, named as they are imported."""
  for top in ('tff_hdp',) + TOP_FOLDERS:
    for dirpath, _, files in os.walk(os.path.join(root, top)):
      for name in sorted(files):
        if not name.endswith('.py'):
          continue
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, root)[:-3].replace(os.sep, '.')
        if top in TOP_FOLDERS:
          rel = f'tff_hdp.{rel}'
        module = rel.removesuffix('.__init__')
        yield path, module, (module if name == '__init__.py' else
                             module.rpartition('.')[0])


def _imports(path: str, package: str) -> list[str]:
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:  # relative: resolve against the importing package
        base = '.'.join(package.split('.')[:len(package.split('.')) -
                                            node.level + 1] + [base])
      found += [f'{base}.{a.name}' for a in node.names]
  return found


def _allowed(importer: str, imported: str) -> bool:
  if importer == 'tasks':
    return imported in ('root', 'tasks')
  if imported == 'tasks':
    return importer == 'cli'
  return ORDER.index(imported) <= ORDER.index(importer)


def violations(root: str) -> list[str]:
  """Every import under `root`'s tff_hdp/, tasks/ and cli/ that breaks the
  layering, or names `tasks` / `cli` by their bare folder names, as
  'importer -> imported (why)'."""
  found = []
  for path, module, package in _module_files(root):
    importer = layer_of(module)
    for imported_module in _imports(path, package):
      if imported_module.split('.')[0] in TOP_FOLDERS:
        found.append(f'{module} -> {imported_module} (installed as '
                     f'tff_hdp.{imported_module})')
        continue
      if (importer in NO_TENSORFLOW and
          imported_module.split('.')[0] in ('tensorflow',
                                            'tensorflow_federated')):
        found.append(f'{module} -> {imported_module} (the {importer} '
                     'layer is pure Python)')
      imported = layer_of(imported_module)
      if imported is not None and not _allowed(importer, imported):
        found.append(f'{module} -> {imported_module} ({importer} may not '
                     f'import {imported})')
  return found


def test_no_layer_imports_a_higher_one():
  assert violations(ROOT) == []


def import_cycles(root: str) -> list[list[str]]:
  """The project's modules that import each other in a cycle (inside
  functions too), each cycle once as its sorted module names: a cycle only
  works while an import stays deferred, and reorders easily into an error."""
  modules = {module: (path, package)
             for path, module, package in _module_files(root)}
  graph = {}
  for module, (path, package) in modules.items():
    graph[module] = set()
    for imported in _imports(path, package):  # the longest module it names
      parts = imported.split('.')
      found = next((m for m in ('.'.join(parts[:k]) for k in
                                range(len(parts), 0, -1)) if m in modules),
                   module)
      if found != module:
        graph[module].add(found)
  def reaches(start):
    seen, todo = set(), [start]
    while todo:
      for m in graph[todo.pop()] - seen:
        seen.add(m)
        todo.append(m)
    return seen
  reach = {m: reaches(m) for m in graph}
  cycles = {tuple(sorted(m2 for m2 in reach[m] if m in reach[m2]))
            for m in graph if m in reach[m]}
  return sorted(list(c) for c in cycles)


def test_no_modules_import_each_other():
  assert import_cycles(ROOT) == []


def _write(root, relpath, text=''):
  path = os.path.join(root, relpath)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(text)


def test_the_check_reports_an_upward_import(tmp_path):
  root = str(tmp_path)
  _write(root, 'tff_hdp/__init__.py')
  _write(root, 'tff_hdp/aggregators/__init__.py')
  _write(root, 'tff_hdp/aggregators/rule.py',
         'def f():\n  from tff_hdp.simulation import round_loop\n')
  _write(root, 'tff_hdp/privacy/plan.py', 'import tensorflow as tf\n')
  _write(root, 'tff_hdp/learning/uses_task.py',
         'from tff_hdp.tasks import mnist\n')
  _write(root, 'tasks/loader.py', 'from tff_hdp.learning import dp_sgd\n')
  _write(root, 'cli/bare.py', 'from tasks import mnist\n')
  _write(root, 'tff_hdp/simulation/ok.py',
         'from tff_hdp.learning import dp_sgd\nfrom tff_hdp import metrics\n')
  assert sorted(violations(root)) == sorted([
      'tff_hdp.aggregators.rule -> tff_hdp.simulation.round_loop '
      '(aggregators may not import simulation)',
      'tff_hdp.privacy.plan -> tensorflow (the privacy layer is pure Python)',
      'tff_hdp.learning.uses_task -> tff_hdp.tasks.mnist (learning may not '
      'import tasks)',
      'tff_hdp.tasks.loader -> tff_hdp.learning.dp_sgd (tasks may not import '
      'learning)',
      'tff_hdp.cli.bare -> tasks.mnist (installed as tff_hdp.tasks.mnist)',
  ])


def test_the_check_reports_a_cycle_through_a_deferred_import(tmp_path):
  root = str(tmp_path)
  _write(root, 'tasks/a.py', 'from tff_hdp.tasks import b\n')
  _write(root, 'tasks/b.py', 'def f():\n  from tff_hdp.tasks.a import g\n')
  _write(root, 'tasks/c.py', 'from tff_hdp.tasks import a\n')
  assert import_cycles(root) == [['tff_hdp.tasks.a', 'tff_hdp.tasks.b']]


def test_the_privacy_layer_and_the_flags_load_without_tensorflow():
  """`--help` and the flag checks run before TensorFlow is imported, and the
  privacy layer is pure Python at run time too, not only in its imports."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ('import sys\n'
          'import tff_hdp.privacy.accounting, tff_hdp.privacy.plans\n'
          'import tff_hdp.privacy.release_policy\n'
          'import tff_hdp.privacy.empirical_epsilon\n'
          'import tff_hdp.cli.flags, tff_hdp.cli.entry, tff_hdp.tasks\n'
          'from tff_hdp.learning import algorithms\n'
          'loaded = sorted(m for m in sys.modules\n'
          '                if m.split(".")[0] in ("tensorflow",\n'
          '                                       "tensorflow_federated"))\n'
          'print(len(loaded), loaded[:3])\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith('0 '), result.stdout

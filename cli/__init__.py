"""The command line: flags grouped by setting, their validation, one module
per setting, the named presets and the programs (run_experiment, reproduce,
plan, run_worker). Algorithm lists come from the library's registries.

Installed, this package is `tff_hdp.cli`. The checkout's top-level scripts
import it by its folder name instead (their folder is first on sys.path),
for `start` only: it must run before `tff_hdp` is importable, to turn a
Python without the pinned stack or the installed package into one line.
"""

import importlib
import os
import sys


def start(program: str) -> None:
  """Runs `tff_hdp.cli.<program>`; a failed import is one line, exit 2."""
  try:
    module = importlib.import_module(f'tff_hdp.cli.{program}')
  except ImportError as missing:  # no pinned stack, or no installed package
    hint = ' (run `make install`)' if missing.name == 'tff_hdp.cli' else ''
    print(f'{os.path.basename(sys.argv[0])}: error: {missing}{hint}',
          file=sys.stderr)
    sys.exit(2)
  module.run()

"""The worker shim library: built by `make install`, found by every run.

`worker_shim.c` confines TFF's `worker_binary` to one address (workers.py).
It is compiled once, at install time, into the virtualenv, so that a run
needs no C compiler and writes no cache: `python worker_shim.py` (what the
Makefile runs, with only the standard library, before the heavy packages are
installed), or `tff-hdp-build-shim` in an environment the package was
installed into, builds it or says in one line what to install. The file name
holds the source's hash, so an edited `worker_shim.c` is never served stale.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'worker_shim.c')
INSTALL_HINT = ('install a C compiler and the C library headers, e.g. '
                '`sudo apt-get install gcc libc6-dev` (Debian/Ubuntu), or '
                'set CC to one')


class ShimError(RuntimeError):
  """The shim cannot be built, or was not built (one line, says why)."""


def library_path() -> str:
  """Where `make install` puts the shim built from this `worker_shim.c`:
  in the virtualenv of the Python running this (`sys.prefix`)."""
  with open(SOURCE, 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]
  return os.path.join(sys.prefix, 'lib', 'tff_hdp',
                      f'worker_shim-{digest}.so')


def installed_library() -> str:
  """The built shim; `ShimError` saying to run `make install` if absent."""
  path = library_path()
  if not os.path.isfile(path):
    raise ShimError(f'the TFF worker shim {path} is not built (it is built '
                    f'from {SOURCE} at install time); run `make install` '
                    'in the checkout, or `tff-hdp-build-shim` where the '
                    'package is installed (README, "Your own environment")')
  return path


def _compiler() -> list[str]:
  if os.environ.get('CC'):
    command = shlex.split(os.environ['CC'])
    if shutil.which(command[0]) is None:
      raise ShimError(f'CC={os.environ["CC"]}: no such program; '
                      f'{INSTALL_HINT}')
    return command
  for name in ('cc', 'gcc', 'clang'):
    if shutil.which(name):
      return [name]
  raise ShimError(f'no C compiler found (cc, gcc or clang on PATH, or CC): '
                  f'the TFF worker needs a small library built from '
                  f'{SOURCE}; {INSTALL_HINT}')


def build() -> str:
  """Compiles the shim into `library_path()` unless it is there already."""
  path = library_path()
  if os.path.isfile(path):
    return path
  compiler = _compiler()
  folder = os.path.dirname(path)
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix='.so', dir=folder)
  os.close(fd)
  try:
    result = subprocess.run(
        compiler + ['-shared', '-fPIC', '-O2', '-o', tmp, SOURCE, '-ldl'],
        capture_output=True, text=True, check=False)
  except OSError as e:
    os.remove(tmp)
    raise ShimError(f'running {compiler[0]} failed ({e.strerror}); '
                    f'{INSTALL_HINT}') from None
  if result.returncode != 0:
    os.remove(tmp)
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if 'error' in l] or lines
    detail = f': {errors[0].strip()}' if errors else ''
    raise ShimError(f'building {SOURCE} with {" ".join(compiler)} failed '
                    f'(exit status {result.returncode}){detail}; '
                    f'{INSTALL_HINT}')
  os.chmod(tmp, 0o755)  # every user's workers preload it
  os.replace(tmp, path)
  for stale in glob.glob(os.path.join(folder, 'worker_shim-*.so')):
    if stale != path:  # built from an earlier worker_shim.c
      os.remove(stale)
  return path


def main() -> None:
  try:
    build()
  except (ShimError, OSError) as e:
    sys.exit(f'tff-hdp: error: {e}')


if __name__ == '__main__':
  main()

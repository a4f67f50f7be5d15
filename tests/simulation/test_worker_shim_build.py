"""The worker shim is built by `make install` (its `shim` step), so runs need
no C compiler: without one the step is one line naming what to install, and
a run whose virtualenv lacks the shim is one line saying `make install`.

Each test makes a fresh virtualenv in a temporary folder (no pip, the
installed packages reached through a .pth file), as a fresh clone's
`make install` has before it installs the packages, and runs the Makefile's
`shim` target into it with PATH pointing to an empty folder.
"""

import os
import shutil
import site
import subprocess
import sys

import portpicker
import pytest

from tests import repository

SOURCE = os.path.join('tff_hdp', 'simulation', 'worker_shim.c')
INSTALL_LINE = 'sudo apt-get install gcc libc6-dev'
MAKE = shutil.which('make')


@pytest.fixture
def venv(tmp_path):
  """A fresh virtualenv (what `make install` creates first) that reaches
  this one's packages, the project's editable install among them (its .pth
  files are read, as `addsitedir` reads them); its shim is not built."""
  path = tmp_path / 'venv'
  subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(path)],
                 check=True)
  python = path / 'bin' / 'python'
  packages = subprocess.run(
      [str(python), '-c',
       'import sysconfig; print(sysconfig.get_path("purelib"))'],
      check=True, capture_output=True, text=True).stdout.strip()
  with open(os.path.join(packages, 'installed.pth'), 'w') as f:
    f.write(''.join(f'import site; site.addsitedir({p!r})\n'
                    for p in site.getsitepackages()))
  return path


def _libraries(venv):
  folder = venv / 'lib' / 'tff_hdp'
  return sorted(folder.iterdir()) if folder.exists() else []


def _empty_folder(tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir(exist_ok=True)
  return str(empty)


def _make_shim(venv, tmp_path, path=None, **env):
  """`make shim` into `venv`, with PATH `path` (default: an empty folder)."""
  assert MAKE, 'make is needed to install tff-hdp (README: Two commands)'
  return subprocess.run(
      [MAKE, '--no-print-directory', '-C', repository.ROOT, 'shim',
       f'VENV={venv}'],
      env=dict(HOME=str(tmp_path), PATH=path or _empty_folder(tmp_path),
               **env),
      capture_output=True, text=True, timeout=120)


def _error_line(result):
  assert result.returncode != 0
  assert 'Traceback' not in result.stderr, result.stderr
  ours = [l for l in result.stderr.splitlines() if l.startswith('tff-hdp:')]
  # The only other line is make's own "make: *** [Makefile:N: shim] Error 1".
  others = [l for l in result.stderr.splitlines()
            if l not in ours and not l.startswith('make: ***')]
  assert len(ours) == 1 and not others, result.stderr
  return ours[0]


@pytest.mark.parametrize('cc, fragment', [
    (None, 'no C compiler found'),
    ('/bin/false', f'building {repository.ROOT}/{SOURCE} with /bin/false '
     'failed (exit status 1)'),
    ('/nonexistent/cc', 'CC=/nonexistent/cc: no such program'),
])
def test_without_a_compiler_make_install_says_what_to_install(
    venv, tmp_path, cc, fragment):
  result = _make_shim(venv, tmp_path, **({'CC': cc} if cc else {}))
  line = _error_line(result)
  assert line.startswith('tff-hdp: error: ') and fragment in line, line
  assert INSTALL_LINE in line, line
  assert not _libraries(venv)


def test_without_the_c_library_headers_the_line_names_them(venv, tmp_path):
  # A compiler without libc6-dev: its headers are not found.
  result = _make_shim(
      venv, tmp_path, path=os.environ['PATH'],
      CC=f'cc -nostdinc -I{_empty_folder(tmp_path)}')
  line = _error_line(result)
  assert 'arpa/inet.h: No such file or directory' in line, line
  assert INSTALL_LINE in line, line
  assert not _libraries(venv)


@pytest.mark.tf
def test_a_run_without_the_shim_says_make_install(venv, tmp_path):
  result = subprocess.run(
      [str(venv / 'bin' / 'python'),
       os.path.join(repository.ROOT, 'run_experiment.py'), '--task=digits',
       '--algorithms=fedhdp', '--rounds=1', f'--output_dir={tmp_path / "out"}'],
      capture_output=True, text=True, timeout=300,
      env=dict(os.environ, PATH=_empty_folder(tmp_path)))
  assert result.returncode == 2, result.stderr
  [line] = result.stderr.strip().splitlines()
  assert line.startswith('run_experiment.py: error: the TFF worker shim '
                         f'{venv}/lib/tff_hdp/worker_shim-'), line
  assert line.endswith(f'.so is not built (it is built from '
                       f'{repository.ROOT}/{SOURCE} at install time); run '
                       '`make install` in the checkout, or '
                       '`tff-hdp-build-shim` where the package is installed '
                       '(README, "Your own environment")'), line


def test_make_install_builds_it_once_and_workers_need_no_compiler(
    venv, tmp_path):
  stale = venv / 'lib' / 'tff_hdp' / 'worker_shim-0123456789abcdef.so'
  stale.parent.mkdir(parents=True)
  stale.write_bytes(b'built from an earlier worker_shim.c')
  result = _make_shim(venv, tmp_path, path=os.environ['PATH'])
  assert result.returncode == 0 and not result.stderr, result.stderr
  [library] = _libraries(venv)
  assert library.name.startswith('worker_shim-') and library.suffix == '.so'
  assert library.stat().st_mode & 0o777 == 0o755
  built = library.stat().st_mtime_ns
  # Again, without a compiler: nothing to do.
  assert _make_shim(venv, tmp_path).returncode == 0
  assert _libraries(venv) == [library]
  assert library.stat().st_mtime_ns == built
  # A worker started from that virtualenv, with nothing on PATH and no
  # writable cache, listens on loopback only.
  check = ('import sys; from tff_hdp.simulation import workers; '
           'p = workers.start_worker(int(sys.argv[1]), die_with_parent=True, '
           'stdout=-3, stderr=-3); '
           'print(len(workers.listening_addresses(p.pid)), '
           'workers.exposed_addresses(p.pid, workers.LOOPBACK)); '
           'workers.stop_process(p)')
  port = portpicker.pick_unused_port()
  started = subprocess.run(
      [str(venv / 'bin' / 'python'), '-c', check, str(port)],
      cwd=repository.ROOT, capture_output=True, text=True, timeout=120,
      env=dict(os.environ, PATH=_empty_folder(tmp_path),
               XDG_CACHE_HOME='/nonexistent', HOME='/nonexistent'))
  assert started.returncode == 0, started.stderr
  assert started.stdout.strip() == '1 []', started.stdout

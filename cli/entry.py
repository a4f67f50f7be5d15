"""How every entry point starts: flags first, TensorFlow after.

`run(main)` is absl's `app.run` with three differences a command-line user
expects. `--help` (and `-h`, `--helpshort`, `--helpfull`) prints the usage
and the flags grouped by setting and exits 0 before TensorFlow is imported,
so it is instant. A bad flag value is one line, `<program>: error: ...`, with
exit status 2, also before TensorFlow is imported where the check needs no
data. Ctrl-C ends with one line saying how to resume, not a traceback, and so
does a full disk, naming the file it could not write.

TensorFlow is imported by the flag parser, after the flags are read: Keras
2.14 cannot build functional or Sequential models when TensorFlow is first
imported inside `app.run`'s main. A program that uses none (run_worker.py)
says so and is spared the import.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import textwrap
from typing import Callable, Sequence

try:
  import tff_hdp  # noqa: F401  (names a missing stack; quiets TF's start-up log)
  from absl import app
  from absl import flags as absl_flags
except ImportError as missing:  # a Python without the pinned stack
  print(f'{os.path.basename(sys.argv[0])}: error: {missing}',
        file=sys.stderr)
  sys.exit(2)

HELP_FLAGS = ('--help', '-h', '-?', '--helpshort', '--helpfull')
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_WORKER_LOST = 3
_RESUME = 're-run the same command to resume from the last checkpoint'


class InputError(ValueError):
  """Bad flags or data: reported as one line, without a traceback."""


def program() -> str:
  return os.path.basename(sys.argv[0])


def fail(message: str) -> None:
  """Ends the program with one error line and exit status 2."""
  sys.stderr.write(f'{program()}: error: {message}\n')
  sys.exit(EXIT_BAD_INPUT)


def file_error(error: OSError) -> str:
  """'<file>: <OS error>' for an `OSError` (both files when it names two).

  A full disk also says so and how to go on; when its error names no file
  (a write not named on the way, e.g. the folder's lock), it names
  --output_dir, where the run writes.
  """
  full = error.errno == errno.ENOSPC
  names = ' -> '.join(str(f) for f in (error.filename, error.filename2)
                      if f is not None) or (full and _output_dir())
  if not names:
    return str(error)
  if full:
    return (f'{names}: {error.strerror} (the disk is full); free space, then '
            f'{_RESUME}')
  return f'{names}: {error.strerror or error}'


def _output_dir() -> str | None:
  flags = absl_flags.FLAGS
  return flags.output_dir if 'output_dir' in flags else None


def check_writable(folder: str) -> None:
  """`InputError` naming the first folder or file under `folder` that this
  process cannot write (nothing is written): found before a run, not after
  it trained."""
  if not os.path.isdir(folder):
    return
  for root, _, files in os.walk(folder, onerror=_raise):
    for path, mode in [(root, os.W_OK | os.X_OK)] + [
        (os.path.join(root, f), os.W_OK) for f in files]:
      if not os.access(path, mode):
        raise InputError(f'--output_dir={folder}: {path} is not writable '
                         '(a run writes there); make it writable or choose '
                         'another --output_dir')


def _raise(error: OSError) -> None:
  raise InputError(f'--output_dir: {file_error(error)}')


def _hold_output_dir(folder_lock, created: bool):
  """The run's hold on its --output_dir (`folder_lock`): a second command
  into the same folder stops at once, before it loads data or writes. A
  folder this command `created` goes again when the run fails before
  writing into it, so a refused command leaves no empty folder behind."""
  flags = absl_flags.FLAGS
  folder = _output_dir()
  dry_run = 'dry_run' in flags and flags.dry_run
  if not folder or dry_run or not os.path.isdir(folder):
    return contextlib.nullcontext()
  return _held(folder_lock, folder, created)


@contextlib.contextmanager
def _held(folder_lock, folder: str, created: bool):
  with folder_lock.exclusive(folder):
    try:
      yield
    except BaseException:
      if created:  # still held: no other run can have started writing
        folder_lock.remove_if_unused(folder)
      raise


def _describe(flag: absl_flags.Flag) -> str:
  default = flag.default
  if isinstance(default, list):
    default = ','.join(str(v) for v in default)
  text = f'--{flag.name}: {flag.help}'
  values = getattr(flag.parser, 'enum_values', None)
  if values:  # absl writes them as a '<a|b>: ' prefix; a list wraps better
    text = (f'--{flag.name}: {flag.help.partition(">: ")[2]} One of: '
            f'{", ".join(values)}.')
  if default is not None and default != '':
    text += f' (default: {default})'
  return textwrap.fill(text, 80, initial_indent='  ',
                       subsequent_indent='      ', break_long_words=False,
                       break_on_hyphens=False)


def help_text(usage: str, groups: Sequence[tuple[str, Sequence[str]]]) -> str:
  """`usage`, then each (title, flag names) group with the flags' help."""
  lines = [usage.strip(), '']
  for title, names in groups:
    lines += [f'{title}:'] + [_describe(absl_flags.FLAGS[n]) for n in names]
    lines.append('')
  return '\n'.join(lines)


def run(main: Callable[[list[str]], None], usage: str,
        groups: Sequence[tuple[str, Sequence[str]]] | None = None,
        validate: Callable[[], None] | None = None,
        share_output_dir: bool = False,
        needs_tensorflow: bool = True) -> None:
  """Runs `main` as absl's `app.run` does (see the module docstring).

  Args:
    main: the program, called with the arguments left after the flags.
    usage: the text `--help` prints before the flags (the module docstring).
    groups: (title, flag names) for `--help`; default: the main module's
      flags as absl lists them.
    validate: checks the flag values before TensorFlow is imported; raises
      `InputError` naming the flag.
    share_output_dir: leave --output_dir open to other invocations: `main`
      holds each run's own folder instead (a sweep several invocations share).
    needs_tensorflow: False for a program that never uses TensorFlow (e.g.
      run_worker.py, which starts TFF's C++ worker): it then starts in a
      fraction of a second and without the import's memory.
  """

  created = False  # whether the flag checks created --output_dir

  def parse(argv: list[str]) -> list[str]:
    nonlocal created
    if any(a.split('=')[0] in HELP_FLAGS for a in argv[1:]):
      try:
        text = (help_text(usage, groups) if groups else
                f'{usage.strip()}\n\n{absl_flags.FLAGS.main_module_help()}')
        print(text, flush=True)
      except BrokenPipeError:  # e.g. `--help | head`: the reader is gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
      sys.exit(0)
    try:
      rest = absl_flags.FLAGS(argv)
    except absl_flags.Error as e:
      fail(f'{e} (see --help)')
    if len(rest) > 1:
      fail(f'unexpected arguments: {" ".join(rest[1:])} (flags are written '
           '--name=value)')
    given = _output_dir()  # None: a default folder, named by validate
    existed = bool(given) and os.path.exists(given)
    try:
      if validate is not None:
        validate()
      folder = _output_dir()
      created = bool(folder) and not existed and os.path.isdir(folder)
      if 'output_dir' in absl_flags.FLAGS and absl_flags.FLAGS.output_dir:
        check_writable(absl_flags.FLAGS.output_dir)
    except InputError as e:
      fail(str(e))
    if needs_tensorflow:
      import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    return rest

  def guarded_main(argv: list[str]) -> None:
    # pylint: disable=g-import-not-at-top
    from tff_hdp.simulation import folder_lock
    from tff_hdp.simulation.workers import WorkerFailedError
    from tff_hdp.simulation.workers import WorkerStartError
    from tff_hdp.simulation.workers import WorkerUnavailableError
    # pylint: enable=g-import-not-at-top
    tf_file_errors = ()  # `except ()` catches nothing
    if needs_tensorflow:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf_file_errors = tf.errors.PermissionDeniedError
    try:
      with (contextlib.nullcontext() if share_output_dir else
            _hold_output_dir(folder_lock, created)):
        main(argv)
    except (InputError, WorkerStartError, folder_lock.FolderInUseError) as e:
      fail(str(e))
    except OSError as e:
      fail(file_error(e))
    except tf_file_errors as e:  # TF's file I/O, e.g. a save
      fail(e.message.splitlines()[0])
    except (WorkerUnavailableError, WorkerFailedError) as e:
      # Threads still waiting on the lost worker would block a normal exit.
      sys.stderr.write(f'{program()}: error: {e}\n')
      sys.stderr.flush()
      sys.stdout.flush()
      os._exit(EXIT_WORKER_LOST)  # pylint: disable=protected-access

  if sys.version_info[:2] != (3, 11):
    sys.exit(f'tff-hdp needs Python 3.11 (TensorFlow 2.14 / TFF 0.87); this '
             f'is Python {sys.version.split()[0]}.')
  try:
    app.run(guarded_main, flags_parser=parse)
  except KeyboardInterrupt:
    sys.stderr.write(f'\n{program()}: interrupted; {_RESUME}.\n')
    sys.exit(EXIT_INTERRUPTED)

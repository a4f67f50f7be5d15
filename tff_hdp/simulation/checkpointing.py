"""Resumable runs: program state saved with `tff.program.FileProgramStateManager`.

Everything random in a run is a function of the round number and either the
public seed (data order) or the run's secret seed (DP noise and sampling,
`tff_hdp.privacy.dp_randomness`), or lives in the learning process state, and each
group's privacy spend is a function of the round number. Saving the process
state with the round as the version, and the secret seed once, is therefore
enough for a resumed run to equal an uninterrupted one. The secret seed is
written (with the run's key) before the run releases anything, so a run
killed before its first checkpoint repeats its rounds exactly when re-run
instead of releasing them again with fresh noise. The checkpoint folder is
the run's private state, never a release: it holds the secret (also inside
the aggregator's saved state) and, with Ditto, noise-free personal models, so
it and everything in it are readable by their owner only (0700 / 0600).
A checkpoint belongs to one configuration:
the run's key (its settings, the task's data and batch size) is stored beside
it and a mismatch is an error, as is a checkpoint whose structure differs
from the process's state. An unreadable checkpoint gives way to the newest
intact one before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import os
import shutil
import stat
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_hdp.learning import ditto


class CheckpointError(RuntimeError):
  """A checkpoint exists but cannot be used for this run."""


_KEY_FILE = 'run_key.json'
_SECRET_FILE = 'dp_secret_seed'
_SECONDS_FILE = 'seconds.json'
_PENDING_ROW_FILE = 'pending_row.json'
_PREFIX = 'round_'  # of each saved round's folder


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
  """Re-raises what fails while writing `path` as an `OSError` naming it.

  A write or flush that fails raises an `OSError` without a file name (e.g.
  `[Errno 28] No space left on device`), and TF's file ops raise
  `ResourceExhaustedError` for a full disk (or quota); either left the user
  without the path to free space for.
  """
  try:
    yield
  except tf.errors.ResourceExhaustedError:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from None
  except OSError as e:
    if e.filename is not None:
      raise
    raise OSError(e.errno, e.strerror, path) from None


def read_json_dict(path: str | None) -> dict:
  """The JSON object in `path`, or {} if there is none or it cannot be read
  (a file that only saves time is rebuilt rather than trusted)."""
  try:
    with open(path) as f:
      value = json.load(f)
  except (TypeError, OSError, ValueError):
    return {}
  return value if isinstance(value, dict) else {}


def write_json_atomically(path: str, value) -> None:
  """Writes `value` as JSON; a crash mid-write leaves the previous file."""
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with writing(path), open(f'{path}.tmp', 'w') as f:
    json.dump(value, f, indent=0, sort_keys=True)
  os.replace(f'{path}.tmp', path)


def make_private(directory: str) -> None:
  """Creates `directory` if need be and takes group and other access away
  from it and everything under it (the owner's own bits are kept, so a
  folder its owner made read-only stays so).

  Files written inside by other libraries (TFF's program state manager)
  get the process's umask; the folder's own 0700 already shuts others out
  while they are written, and this call then tightens the files too.
  """
  os.makedirs(directory, mode=0o700, exist_ok=True)
  paths = [directory]
  for root, dirs, files in os.walk(directory):
    paths += [os.path.join(root, name) for name in dirs + files]
  for path in paths:
    mode = os.lstat(path).st_mode
    if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) & 0o077:
      os.chmod(path, stat.S_IMODE(mode) & 0o700)


def _write_private(path: str, text: str) -> None:
  """Writes `text` to `path` (owner-only), replacing it atomically and
  durably: a kill or a power cut at any moment leaves the old file or the
  whole new one, never an empty or partial one."""
  fd = os.open(f'{path}.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with writing(path), os.fdopen(fd, 'w') as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(f'{path}.tmp', path)
  directory = os.open(os.path.dirname(path) or '.', os.O_RDONLY)
  try:
    os.fsync(directory)  # the rename itself
  finally:
    os.close(directory)


def _dtype_name(dtype) -> str:
  """A leaf's dtype as compared between a checkpoint and a state: every
  string kind is one ('|S22' as saved, '<U0' in a TFF type)."""
  dtype = np.dtype(dtype)
  return 'string' if dtype.kind in 'SUO' else dtype.str


def _leaves_signature(structure) -> list[tuple[tuple[int, ...], str]]:
  return [(tuple(np.shape(x)), _dtype_name(np.asarray(x).dtype))
          for x in tf.nest.flatten(structure)]


def _type_signature(state_type) -> list[tuple[tuple, str]]:
  """(shape, dtype) of each leaf of a TFF state type, None where the type
  leaves a dimension open, in the order of `tf.nest.flatten` of a state."""
  if isinstance(state_type, tff.FederatedType):
    state_type = state_type.member

  class Leaf:  # not a nest, so tf.nest keeps it whole
    def __init__(self, t):
      self.signature = (tuple(t.shape), _dtype_name(t.dtype))

  return [leaf.signature for leaf in tf.nest.flatten(
      tff.types.structure_from_tensor_type_tree(Leaf, state_type))]


class RunCheckpoint:
  """Saves and restores one run's learning-process state by round number."""

  def __init__(self, directory: str, run_key: dict, keep: int = 2):
    self._directory = directory
    self._run_key = json.loads(json.dumps(run_key, sort_keys=True, default=str))
    self._manager = tff.program.FileProgramStateManager(
        directory, prefix=_PREFIX, keep_total=keep, keep_first=False)
    self._secret = None

  @property
  def directory(self) -> str:
    return self._directory

  def check_key(self) -> bool:
    """Whether the folder holds this run's key (False: no key yet); raises
    CheckpointError if it holds another run's."""
    path = os.path.join(self._directory, _KEY_FILE)
    if not os.path.exists(path):
      return False
    try:
      with open(path) as f:
        stored = json.load(f)
    except (OSError, ValueError) as e:
      raise CheckpointError(f'cannot read {path}: {e}') from None
    if stored != self._run_key:
      changed = sorted(k for k in set(stored) | set(self._run_key)
                       if stored.get(k) != self._run_key.get(k))
      raise CheckpointError(
          f'{self._directory} holds a checkpoint of a different run '
          f'(differs in: {", ".join(changed)}); use another --output_dir or '
          'delete that folder to start over.')
    return True

  def claim(self) -> None:
    """Writes this run's key into the folder before the run releases
    anything, with or without saved rounds, so that a later run of other
    settings into the folder is refused (`check_key`) instead of mixing its
    files with this run's."""
    if not self.check_key():
      self._write_key()

  def dp_secret(self, draw: Callable[[], int]) -> int:
    """The run's secret seed: the saved one, else `draw()`, written at once
    (owner-only, with the run's key) so that every round released from now
    on can be repeated exactly by a re-run, whenever it is killed."""
    self.check_key()
    path = os.path.join(self._directory, _SECRET_FILE)
    if os.path.exists(path):
      try:
        with open(path) as f:
          self._secret = int(f.read())
      except (OSError, ValueError) as e:
        raise CheckpointError(f'cannot read {path}: {e}') from None
    elif asyncio.run(self._manager.get_versions()):
      raise CheckpointError(
          f'checkpoint in {self._directory} has no secret seed ({path}), so '
          'its DP noise cannot be continued; delete the folder to start over.')
    else:
      self._secret = draw()
      self._write_key()
      _write_private(path, str(self._secret))
    return self._secret

  def _write_key(self) -> None:
    make_private(self._directory)
    _write_private(os.path.join(self._directory, _KEY_FILE),
                   json.dumps(self._run_key, indent=2, sort_keys=True))

  def restore(self, template, client_ids=None, state_type=None):
    """(state, round, personal models) of the newest intact checkpoint, or
    (None, 0, None) if there is none.

    The saved state must match `template` leaf by leaf; with `state_type`
    (the state's TFF type), a leaf of a dimension the type leaves open
    (e.g. float32[?], state that grows after round 1) may have any size
    there.

    A checkpoint that cannot be read (e.g. cut short by a full disk) is
    skipped, with a line saying so, for the one before it: its rounds are
    redone with the same secret seed, so they release exactly what they
    released before and spend nothing more. With `client_ids`, the personal
    models saved with the state are loaded too and are part of "intact".
    """
    self.check_key()
    try:
      versions = sorted(asyncio.run(self._manager.get_versions()) or [],
                        reverse=True)
    except Exception as e:  # pylint: disable=broad-except
      raise CheckpointError(
          f'checkpoint in {self._directory} is unreadable ({type(e).__name__}:'
          f' {e}); delete it to start over.') from None
    if not versions:
      return None, 0, None
    failures = []
    for version in versions:
      try:
        state = asyncio.run(self._manager.load(version, template))
        personal = (self._load_personal(version, client_ids)
                    if client_ids is not None else None)
      except Exception as e:  # pylint: disable=broad-except
        failures.append(f'round {version}: {type(e).__name__}: {e}')
        continue
      self._check_compatible(template, state, version, state_type)
      if failures:
        for newer in versions[:len(failures)]:  # to be saved again
          shutil.rmtree(os.path.join(self._directory, f'{_PREFIX}{newer}'))
          if os.path.exists(self.personal_path(newer)):
            os.remove(self.personal_path(newer))
        print(f'{self._directory}: skipped unreadable checkpoint(s) '
              f'({"; ".join(failures)}); resuming from round {version}.')
      return (tf.nest.pack_sequence_as(template, tf.nest.flatten(state)),
              version, personal)
    raise CheckpointError(
        f'checkpoint in {self._directory} is unreadable '
        f'({"; ".join(failures)}); delete it to start over.')

  def _check_compatible(self, template, state, version: int,
                        state_type=None) -> None:
    try:
      tf.nest.assert_same_structure(template, state, check_types=False)
      wanted = (_leaves_signature(template) if state_type is None else
                _type_signature(state_type))
      compatible = len(wanted) == len(tf.nest.flatten(state)) and all(
          dtype == got_dtype and len(shape) == len(got) and all(
              w is None or w == g for w, g in zip(shape, got))
          for (shape, dtype), (got, got_dtype) in zip(
              wanted, _leaves_signature(state)))
    except (ValueError, TypeError):
      compatible = False
    if not compatible:
      raise CheckpointError(
          f'checkpoint in {self._directory} (round {version}) does not match '
          "this run's model or aggregator state; use another --output_dir or "
          'delete it to start over.')

  def _load_personal(self, version: int, client_ids) -> ditto.PersonalModels:
    path = self.personal_path(version)
    if not os.path.exists(path):
      raise FileNotFoundError(f'no personal models ({path})')
    return ditto.PersonalModels.load(path, client_ids)

  def seconds_through(self, round_num: int) -> float:
    """The training seconds of rounds 1..`round_num` as saved (0 if unknown)."""
    seconds = read_json_dict(os.path.join(self._directory, _SECONDS_FILE))
    value = seconds.get(str(round_num), 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0

  def record_seconds(self, round_num: int, seconds: float) -> None:
    """Keeps the seconds spent through `round_num`, so that a resumed run
    reports the time of all its processes; only kept rounds are listed."""
    kept = {str(v) for v in asyncio.run(self._manager.get_versions()) or []}
    path = os.path.join(self._directory, _SECONDS_FILE)
    table = {k: v for k, v in read_json_dict(path).items() if k in kept}
    table[str(round_num)] = seconds
    _write_private(path, json.dumps(table, indent=0, sort_keys=True))

  def record_pending_row(self, round_num: int, cells: dict,
                         numbers: dict) -> None:
    """Keeps round `round_num`'s released row (its rounds.csv `cells` and
    its release managers' `numbers`) before its state is saved, for a run
    whose rounds cannot be redone: a resume that finds the state saved and
    the row not yet released releases this one (`pending_row`)."""
    _write_private(os.path.join(self._directory, _PENDING_ROW_FILE),
                   json.dumps({'round': round_num, 'cells': cells,
                               'numbers': numbers}))

  def pending_row(self, round_num: int) -> tuple[dict, dict] | None:
    """(cells, numbers) of round `round_num` as `record_pending_row` kept
    them, or None if the file holds another round's (a kill between
    recording and saving: that round is redone, never released)."""
    kept = read_json_dict(os.path.join(self._directory, _PENDING_ROW_FILE))
    if kept.get('round') != round_num:
      return None
    return kept['cells'], kept['numbers']

  def personal_path(self, round_num: int) -> str:
    """Where the clients' personal models of round `round_num` are kept."""
    return os.path.join(self._directory, f'personal_round_{round_num}.npz')

  def save(self, state, round_num: int, personal=None) -> None:
    """Saves `state` (and a `PersonalModels` store) as of `round_num`.

    The personal models are written first; a crash before the state is saved
    leaves the previous round's pair intact, and files of rounds without a
    saved state are pruned afterwards.
    """
    self._write_key()
    if personal is not None:
      with writing(self.personal_path(round_num)):
        personal.save(self.personal_path(round_num))
    folder = os.path.join(self._directory, f'{_PREFIX}{round_num}')
    try:
      with writing(folder):
        asyncio.run(self._manager.save(state, round_num))
    except OSError:
      # TFF writes into a temporary folder it renames when complete; a
      # partial one (a full disk) is never read but would hold its space.
      for partial in glob.glob(f'{folder}_temp*'):
        shutil.rmtree(partial, ignore_errors=True)
      raise
    kept = set(asyncio.run(self._manager.get_versions()) or [])
    for name in os.listdir(self._directory):
      if name.startswith('personal_round_') and name.endswith('.npz'):
        version = name[len('personal_round_'):-len('.npz')]
        if version.isdigit() and int(version) not in kept:
          os.remove(os.path.join(self._directory, name))
    make_private(self._directory)

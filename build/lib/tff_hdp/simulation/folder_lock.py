"""One run per output folder at a time.

Two runs writing one folder corrupt each other: both append to `rounds.csv`,
both save checkpoints of the same rounds, and a resumed run may read a
half-written file of the other. A run holds an exclusive `flock` on a file in
its folder for as long as it writes there. The kernel drops the lock when the
process ends, however it ends (`kill -9` included), so a dead run never
leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import Iterator

LOCK_FILE = '.run.lock'


class FolderInUseError(RuntimeError):
  """Another live process is running into the same folder."""

  def __init__(self, folder: str, holder: str):
    self.holder = f'process {holder}' if holder.isdigit() else 'another process'
    super().__init__(f'{folder} is in use by another run ({self.holder}); '
                     'wait for it to finish or pass another --output_dir.')


@contextlib.contextmanager
def exclusive(folder: str) -> Iterator[None]:
  """Holds `folder` for this process; creates it if need be.

  Raises:
    FolderInUseError: another process holds it (the message names the folder
      and that process).
  """
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, LOCK_FILE)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
        raise
      holder = os.pread(fd, 32, 0).decode(errors='replace').strip()
      raise FolderInUseError(folder, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    yield
  finally:
    os.close(fd)


def remove_if_unused(folder: str) -> bool:
  """Removes `folder` when it holds nothing but lock files (in folders of
  its own): what a run leaves that stopped before writing anything, e.g.
  refused by a check that needed the data. Returns whether it did."""
  for _, _, files in os.walk(folder):
    if any(name != LOCK_FILE for name in files):
      return False
  with contextlib.suppress(OSError):
    for root, _, files in os.walk(folder, topdown=False):
      for name in files:
        os.unlink(os.path.join(root, name))
      os.rmdir(root)
  return not os.path.exists(folder)

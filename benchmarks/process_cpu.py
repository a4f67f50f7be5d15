"""Every live process's parent, session and CPU seconds, from /proc: the
benchmarks' CPU counts include processes that no reaped count holds (a TFF
worker its launcher leaves running, the live descendants of a test)."""

from __future__ import annotations

import os

_TICKS = os.sysconf('SC_CLK_TCK')


def live_processes() -> dict[int, tuple[int, int, float]]:
  """{pid: (parent pid, session id, CPU seconds)} of every live process;
  its CPU is its own and its reaped children's."""
  table = {}
  for name in os.listdir('/proc'):
    if not name.isdigit():
      continue
    try:
      with open(f'/proc/{name}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    except OSError:  # gone since the listing
      continue
    table[int(name)] = (int(fields[1]), int(fields[3]),
                        sum(int(v) for v in fields[11:15]) / _TICKS)
  return table

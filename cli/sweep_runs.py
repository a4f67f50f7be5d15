"""One run of a sweep (reproduce.py's presets and figures): skipped when an
earlier invocation finished it, left to another live invocation that holds
its folder (so invocations of one command share the work), else trained
here, resuming from its checkpoint if interrupted, on a local TFF worker of
its own (`runtime.renew_local_worker`)."""

from __future__ import annotations

from typing import Callable

from tff_hdp.cli.entry import InputError


def finished_or_run(label: str, completed: Callable[[], dict | None],
                    train: Callable[[], dict]) -> dict | None:
  """`completed()` (a finished run's summary, or None), else `train()`;
  None if another process holds the run's folder. A run's error is one
  `InputError` naming `label`."""
  # pylint: disable=g-import-not-at-top
  import tqdm
  from tff_hdp.simulation import folder_lock
  from tff_hdp.simulation import runtime
  from tff_hdp.simulation import trusted_setting
  # pylint: enable=g-import-not-at-top
  try:
    summary = completed()
    if summary is not None:
      tqdm.tqdm.write(f'{label}: finished earlier, skipped (summary.json)')
      return summary
    summary = train()
    runtime.renew_local_worker()  # the next run's memory starts afresh
    return summary
  except folder_lock.FolderInUseError as e:
    tqdm.tqdm.write(f'{label}: running in {e.holder}, skipped here')
    return None
  except trusted_setting.RUN_ERRORS as e:
    raise InputError(f'{label}: {e}') from None

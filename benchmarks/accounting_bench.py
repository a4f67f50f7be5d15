"""What the accounting benchmarks share: the setting they plan, FeO2 MNIST
thirds (2,000 clients, 100 a round Poisson, 500 rounds, delta 1e-4, eps
1 / 3.6 / 10), and timing one workload with each of two implementations of
a function, back to back in one process, every cache cleared between."""

from __future__ import annotations

import os
import time
from typing import Callable, Mapping, Sequence

from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg


def thirds(accountant: accounting.Accountant):
  """(assignment, sampling, clip settings) of FeO2 MNIST thirds, accounted
  by `accountant`."""
  groups = [pg.PrivacyGroup(f'eps{e:g}', e, 1e-4) for e in (1.0, 3.6, 10.0)]
  assignment = pg.assign_by_fractions(list(range(2000)), groups,
                                      [1 / 3] * 3, seed=0)
  sampling = accounting.PoissonSampling(0.05, accountant)
  z_b, _ = plans.default_clip_count_stddev(groups, sampling, 500, 2000)
  return assignment, sampling, plans.ClipSettings(count_stddev=z_b)


def clear_caches() -> None:
  """Empties every calibration and accounting cache, so that work is redone."""
  for cache in (plans.plan_client_privacy, plans.plan_privacy,
                accounting.calibrate_noise_multiplier,
                accounting.calibrate_sampling_rate,
                accounting._one_event_rdp,  # pylint: disable=protected-access
                accounting._pld_noise_at,  # pylint: disable=protected-access
                accounting.pld_epsilon,
                accounting._subsampled_gaussian_pld):  # pylint: disable=protected-access
    if hasattr(cache, 'cache_clear'):
      cache.cache_clear()


def back_to_back(module, name: str,
                 variants: Sequence[tuple[str, Callable]],
                 workloads: Mapping[str, Callable], chosen: Sequence[str]
                 ) -> None:
  """Prints the CPU seconds of each `chosen` workload with `module.name`
  set to each of `variants` ((label, function)) in turn, and what the
  workload returned (a text, or (text, seconds) where it times itself);
  `module.name` is restored after."""
  original = getattr(module, name)
  print(f'{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} '
        'at the start; CPU seconds')
  try:
    for workload in chosen:
      for label, function in variants:
        setattr(module, name, function)
        clear_caches()
        start = time.process_time()
        what = workloads[workload]()
        if isinstance(what, tuple):
          what, seconds = what
        else:
          seconds = time.process_time() - start
        print(f'{workload:7s} {label:14s} {seconds:8.2f} s   ({what})',
              flush=True)
  finally:
    setattr(module, name, original)

"""Wall time of the paper-scale non-IID MNIST run (FeO2 Table 3 setting).

2,000 single-digit clients (real MNIST from --data_dir), 100 clients per
round (Poisson; --clients_per_round), 1-layer NN, batch 10, 1 local epoch,
FedHDP r=0.01 at (3.6, 1e-4) with 5% opt-out, evaluation every 10 rounds,
with and without Ditto (--ditto): the whole training loop (sampling,
packing, TFF rounds, evaluation), as `run_experiment.py` runs it, and where
a round's time goes (packing its data, the TFF round with the accounting,
Ditto's personal steps, evaluation spread over the rounds). Each mode runs
--rounds rounds; its --target_rounds estimate is the set-up (building and
tracing the process) plus that many rounds at the measured rate. Loading
MNIST (seconds) is not counted. --canaries=0,1000 times each mode without
and with an audit's canaries (`--canaries`: that many per private group,
sampled like members, their all-rounds scores taken every round; the final
scores and estimates are in the set-up column).

  .venv/bin/python benchmarks/paper_scale.py --rounds=500 --modes=cohort \
      --ditto=off,on
  .venv/bin/python benchmarks/paper_scale.py --rounds=50 --canaries=0,1000
  .venv/bin/python benchmarks/paper_scale.py --rounds=20 \
      --modes=cohort,per_client
"""

from __future__ import annotations

import collections
import dataclasses
import os
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from tff_hdp.cli import entry  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DATA_DIR = flags.DEFINE_string(
    'data_dir', os.path.join(os.path.dirname(_ROOT), 'shared', 'data', 'mnist'),
    'Folder with mnist.npz or the MNIST IDX files.')
_ROUNDS = flags.DEFINE_integer('rounds', 50, 'Rounds measured per mode.')
_TARGET = flags.DEFINE_integer('target_rounds', 500,
                               'Rounds to extrapolate to.')
_MODES = flags.DEFINE_list(
    'modes', ['cohort'], 'cohort (--cohort_size clients per TFF client) '
    'and/or per_client (one TFF client per client).')
_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', 100, 'Expected clients per round (Poisson).')
_COHORT_SIZE = flags.DEFINE_integer('cohort_size', 64,
                                    'Clients per cohort in mode cohort.')
_CANARIES = flags.DEFINE_list(
    'canaries', ['0'], 'Canaries per private group for each mode (an '
    'audit run, run_experiment.py --canaries); 0: none.')
_DITTO = flags.DEFINE_list(
    'ditto', ['off'], 'off and/or on: each mode runs without and/or with '
    'Ditto personalization (lambda 0.25 for every client, eta_p = the client '
    'learning rate; FeO2 Table 3), its personal models evaluated too.')


def _accuracy(value) -> str:
  return '-' if value is None else f'{value:.2f}'


def _time_calls(owner, name: str, totals: dict) -> None:
  """Adds the seconds every call of `owner.name` takes to totals[name]."""
  original = getattr(owner, name)

  def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
      return original(*args, **kwargs)
    finally:
      totals[name] += time.perf_counter() - start

  setattr(owner, name, timed)


def main(argv):
  del argv
  from tff_hdp.tasks import mnist  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.learning.execution import Execution  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy.privacy_groups import PrivacyGroup  # pylint: disable=g-import-not-at-top

  runtime.init()
  task = mnist.load(_DATA_DIR.value)
  n = len(task.client_ids)
  choices = trusted_setting.client_choices(
      task, [PrivacyGroup('private', 3.6, 1e-4)], 0.05, seed=0)
  # Where a round's time goes: packing its data, Ditto's personal steps, the
  # rest of TrustedRounds.train (the TFF round and the accounting), and
  # evaluation (every 10 rounds, spread over the rounds).
  totals = collections.defaultdict(float)
  for owner, name in ((Execution, 'round_data'), (Execution, 'personalize'),
                      (trusted_setting.TrustedRounds, 'train'),
                      (trusted_setting.TrustedRounds, 'evaluate')):
    _time_calls(owner, name, totals)
  if not 0 < _PER_ROUND.value <= n:
    raise app.UsageError(f'--clients_per_round must be in 1..{n} (the '
                         f'clients), got {_PER_ROUND.value}.')
  rows = []
  plain = {}  # (mode, Ditto) -> s/round without canaries
  for mode, ditto, canaries in [(m, d, int(k)) for m in _MODES.value
                                for d in _DITTO.value
                                for k in _CANARIES.value]:
    totals.clear()
    if mode not in ('cohort', 'per_client'):
      raise app.UsageError(f'unknown mode {mode!r}.')
    if ditto not in ('off', 'on'):
      raise app.UsageError(f'--ditto takes off and/or on, got {ditto!r}.')
    settings = trusted_setting.Settings(
        rounds=_ROUNDS.value,
        sampling=accounting.PoissonSampling(_PER_ROUND.value / n),
        clip=plans.ClipSettings(initial_norm=0.5), checkpoint_every=0,
        eval_every=10,
        cohort_size=_COHORT_SIZE.value if mode == 'cohort' else 0,
        canaries=canaries)
    if ditto == 'on':
      settings = dataclasses.replace(
          settings, ditto=trusted_setting.DittoSettings(0.25, 0.25,
                                                        settings.client_lr))
    start = time.perf_counter()
    summary, _ = trusted_setting.run_configuration(
        task, trusted_setting.Configuration('fedhdp', 0.01), choices, settings,
        None, progress=False)
    total = time.perf_counter() - start
    per_round = summary['seconds'] / _ROUNDS.value
    setup = total - summary['seconds']
    estimate = setup + per_round * _TARGET.value
    parts = collections.defaultdict(
        float, {k: v / _ROUNDS.value for k, v in totals.items()})
    tff_round = parts['train'] - parts['round_data'] - parts['personalize']
    if not canaries:
      plain[mode, ditto] = per_round
    cost = (f'{per_round / plain[mode, ditto] - 1:+.1%}'
            if canaries and (mode, ditto) in plain else '-')
    rows.append([
        mode + (f' ({_COHORT_SIZE.value})' if mode == 'cohort' else ''),
        ditto, canaries, _ROUNDS.value, f'{setup:.1f}', f'{per_round:.3f}',
        cost,
        f"{parts['round_data']:.3f}", f'{tff_round:.3f}',
        f"{parts['personalize']:.3f}", f"{parts['evaluate']:.3f}",
        f'{estimate / 60:.1f}', f"{summary['metrics']['acc_g']:.2f}",
        _accuracy(summary['metrics'].get('acc_l_np'))])
  header = ['mode (cohort size)', 'Ditto', 'canaries per group',
            'rounds run', 'setup s', 's/round (incl. eval)',
            'vs no canaries', 'packing', 'TFF round + accounting',
            'Ditto step', 'evaluation', f'{_TARGET.value} rounds, min',
            'Acc_g after the rounds run', 'Acc_l,np (released)']
  examples = task.num_train_examples(task.client_ids[0])
  print(f'\nnon-IID MNIST: {n} clients, {_PER_ROUND.value} per round '
        f'(Poisson), {examples} '
        'training examples per client, batch 10, 1 epoch\n')
  print(tables.markdown_table(header, rows))


if __name__ == '__main__':
  entry.run(main, __doc__)

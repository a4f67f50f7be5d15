"""The cross-silo setting from the command line: each algorithm over its
lambda x learning-rate grid, the best setting's table and the curves."""

from __future__ import annotations

import os

from tff_hdp.cli import flags

# The algorithms at either end of MR-MTL's lambda: lambda = 0 and lambda -> inf.
SPECTRUM_ENDS = ('local', 'fedavg')


def learning_setup():
  """(settings, lambdas, learning rates) the flags ask for: the settings of
  the grid's first point, and the grid."""
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  lambdas = flags.floats(flags.LAMBDAS)
  rates = flags.floats(flags.CLIENT_LRS) if flags.CLIENT_LRS.value else [flags.CLIENT_LR.value]
  if flags.SWEEP.value:
    if flags.LAMBDAS.present == 0:
      lambdas = list(cse.LAMBDA_GRID)
    if not flags.CLIENT_LRS.value:
      rates = list(cse.LEARNING_RATE_GRID)
  settings = cse.CrossSiloSettings(
      rounds=flags.ROUNDS.value, epsilons=tuple(flags.floats(flags.EPSILONS)),
      delta=flags.floats(flags.DELTAS)[0], learning_rate=rates[0],
      clip_norm=flags.DP_SGD_CLIP.value, regularization=lambdas[0],
      num_clusters=flags.NUM_CLUSTERS.value,
      selection_fraction=flags.SELECTION_FRACTION.value,
      selection_share=flags.SELECTION_SHARE.value, seed=flags.SEED.value,
      eval_every=flags.EVAL_EVERY.value, checkpoint_every=flags.CHECKPOINT_EVERY.value,
      cohort_size=flags.COHORT_SIZE.value,
      epsilon_lambdas=flags.epsilon_lambdas(),
      noise_aware_lambdas=flags.SILO_NOISE_AWARE.value,
      heterogeneity=flags.silo_heterogeneity(),
      regularizer_placement=flags.REGULARIZER_PLACEMENT.value,
      unsafe_seeded_dp_randomness=flags.UNSAFE_SEEDED.value,
      allow_large_delta=flags.UNSAFE_LARGE_DELTA.value,
      canaries=flags.CANARIES.value, **flags.dp_sgd_accounting())
  return settings, lambdas, rates


def _lambda_cell(best, settings) -> str:
  """The table's lambda: the best swept, each silo epsilon's, or each
  silo's from the noise."""
  if settings.noise_aware_lambdas and best is not None:
    return f'from the noise (h {settings.heterogeneity:g})'
  if settings.epsilon_lambdas is not None and best is not None:
    return ','.join(f'{e:g}:{lam:g}' for e, lam in settings.epsilon_lambdas)
  return '-' if best is None else f'{best:g}'


def run() -> None:
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import plots  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  task = flags.load_task()
  settings, lambdas, rates = learning_setup()
  for line in cse.privacy_warnings(settings):
    print(line)
  audited = settings.canaries > 0
  rows, records, curves, best, alarms, bests = [], [], {}, {}, [], []
  try:
    for algorithm in flags.ALGORITHMS.value:
      result = cse.sweep(task, algorithm, settings, lambdas, rates,
                         flags.OUTPUT_DIR.value)
      if result['best_lambda'] is not None and len(result['curve']) > 1:
        curves[algorithm] = result['curve']
      best[algorithm] = result['best_metric']
      bests.append(result['best_summary'])
      alarms += [line for s in result['summaries']
                 for line in tables.audit_alarms(s)]
      low, high = result['epsilon_spent']
      rows.append([
          algorithm,
          _lambda_cell(result['best_lambda'], settings),
          f"{result['best_learning_rate']:g}",
          f"{result['best_metric']:.4g}",
          f'{low:.3g} - {high:.3g}',
          *([tables.client_empirical_cell(result['best_summary'])]
            if audited else []),
          str(len(result['runs'])),
      ])
      records.append({'method': algorithm,
                      'lambda': (_lambda_cell(result['best_lambda'], settings)
                                 if settings.epsilon_lambdas or
                                 settings.noise_aware_lambdas else
                                 result['best_lambda']),
                      'learning_rate': result['best_learning_rate'],
                      task.metric: result['best_metric'],
                      'epsilon_spent_min': low, 'epsilon_spent_max': high,
                      **(tables.client_empirical_record(
                          result['best_summary']) if audited else {}),
                      'runs': len(result['runs'])})
      if audited and flags.OUTPUT_DIR.value:
        tables.write_client_empirical_table(
            os.path.join(flags.OUTPUT_DIR.value,
                         result['best_summary']['configuration']),
            result['best_summary'], task.client_ids)
  except trusted_setting.RUN_ERRORS as e:
    raise flags.InputError(str(e)) from None
  metric = task.metric_record.label
  header = ['Method', 'lambda', 'learning rate', f'{metric}, test-weighted',
            'eps spent per silo (min - max)',
            *([tables.CLIENT_EMPIRICAL_HEADER] if audited else []), 'runs']
  tables.print_and_write_client_table(
      flags.OUTPUT_DIR.value, header, rows, records, audited, alarms,
      heading=f'{task.name}: {len(task.client_ids)} silos, every silo every '
      f'round, {flags.ROUNDS.value} rounds, silo eps '
      f'{",".join(flags.EPSILONS.value)}, best over the swept settings',
      summary=next((s for s in bests if s.get('accountant') == 'pld'), None))
  for algorithm, curve in curves.items():
    print(f'\n{algorithm}: best {metric} over learning rates, per lambda\n')
    print(tables.markdown_table(
        ['lambda', 'learning rate', metric],
        [[f'{lam:g}', f'{lr:g}', f'{m:.4g}'] for lam, lr, m in curve]))
    # The personalization spectrum's ends at their best, as flat lines (the
    # MR-MTL paper's Fig. 5), when they ran too.
    plots.metric_vs_lambda(
        [lam for lam, _, _ in curve], {algorithm: [m for _, _, m in curve]},
        os.path.join(flags.OUTPUT_DIR.value, f'{algorithm}_vs_lambda.png'),
        ylabel=metric, title=f'{task.name}: {algorithm}',
        reference={f'{end} (best)': best[end] for end in SPECTRUM_ENDS
                   if end in best})
  print(f'\nPer-round metrics, summaries and sweeps: {flags.OUTPUT_DIR.value}/')

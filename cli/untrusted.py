"""The untrusted-server setting from the command line: one run per
aggregation rule, and the comparison table."""

from __future__ import annotations

from cli import flags


def run() -> None:
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import untrusted_setting  # pylint: disable=g-import-not-at-top
  task = flags.load_task()
  settings = untrusted_setting.UntrustedSettings(
      rounds=flags.ROUNDS.value,
      epsilon_distribution=flags.EPSILON_DISTRIBUTION.value,
      delta=flags.floats(flags.DELTAS)[0],
      learning_rate=flags.CLIENT_LR.value,
      clip_norm=flags.DP_SGD_CLIP.value,
      seed=flags.SEED.value,
      eval_every=flags.EVAL_EVERY.value,
      rpca_freeze_after_round=flags.RPCA_FREEZE_AFTER_ROUND.value,
      release_unprotected_stats=flags.RELEASE_UNPROTECTED.value,
      unsafe_seeded_dp_randomness=flags.UNSAFE_SEEDED.value,
      allow_large_delta=flags.UNSAFE_LARGE_DELTA.value)
  flags.print_privacy_warnings()
  name = f'{tables.metric_prefix(task.metric)}_g'
  rows, records = [], []
  try:
    for algorithm in flags.ALGORITHMS.value:
      s = untrusted_setting.run_algorithm(task, algorithm, settings,
                                        flags.OUTPUT_DIR.value)
      metric = s['metrics']['acc_g']
      rows.append([algorithm, tables.metric_cell(task.metric, metric),
                   f"{s['epsilon_spent_min']:.3g} - "
                   f"{s['epsilon_spent_max']:.3g}", f"{s['seconds']:.0f}"])
      records.append({'algorithm': algorithm, name.lower(): metric,
                      'epsilon_spent_min': s['epsilon_spent_min'],
                      'epsilon_spent_max': s['epsilon_spent_max'],
                      'seconds': s['seconds']})
  except ValueError as e:
    raise flags.InputError(str(e)) from None
  header = ['Aggregation', name, 'eps spent per client (min - max)',
            'seconds']
  print(f'\n{task.name}: {len(task.client_ids)} clients, all in every round, '
        f'{flags.ROUNDS.value} rounds, eps ~ {flags.EPSILON_DISTRIBUTION.value}\n')
  print(tables.markdown_table(header, rows))
  tables.write_table(flags.OUTPUT_DIR.value, header, rows, records=records)
  print(f'\nPer-round metrics and summaries: {flags.OUTPUT_DIR.value}/')

"""Tables a person reads: Markdown for the terminal and files, CSV for tools.

The variance across clients in parentheses uses the papers' scale. FeO2 and
FedHDP print it for accuracies in percent, yet their values are small (e.g.
93.75(0.13)); their skewed non-IID MNIST row with r = 0, where every private
client scores 0% or 100%, reads 7.1(6.5): a Bernoulli(0.071) variance of
0.066 in fraction units, i.e. 100 x Var[accuracy as a fraction] =
Var[accuracy in %] / 100. The per-round CSVs and summaries keep Var in %^2.
"""

from __future__ import annotations

import csv
import functools
import os
from typing import Callable, Sequence

from tff_hdp import metrics as metrics_lib
from tff_hdp.privacy import release_policy


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
  cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
  lines = ['| ' + ' | '.join(c.ljust(w) for c, w in zip(r, widths)) + ' |'
           for r in cells]
  lines.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
  return '\n'.join(lines)


VARIANCE_NOTE = ('In parentheses: variance across clients of their accuracy, '
                 "in the papers' scale, Var[accuracy in %] / 100 "
                 '(= 100 x Var[accuracy as a fraction]).')


WITHHELD_NOTE = (
    "'-' under Acc_g,p, Acc_l,p and the Delta columns: statistics of private "
    'clients that the printed epsilon does not cover are withheld '
    '(--release_unprotected_stats shows them, without privacy).')
EPSILON_NOTE = ('eps spent (target) per group: epsilon spent at the group\'s '
                'delta over the run, its target in parentheses.')


EMPIRICAL_HEADER = 'eps empirical (final / all rounds)'
AUDIT_NOTE = (
    'An estimate is no bound. A lower bound above the printed epsilon is a '
    'privacy bug, but K canaries a side can certify at most "max" (the '
    'bound of perfectly separated scores), so it cannot flag a printed '
    'epsilon above that. ALARM: the estimate\'s lower confidence limit '
    '(its sampling error split over the run\'s audits) lies above the '
    'printed epsilon, which a correct run shows in at most 5% of runs: the '
    'noise is not what the ledger says.')
EMPIRICAL_NOTE = (
    f'{EMPIRICAL_HEADER} per private group: the canaries\' estimate '
    '(mu-GDP fit of inserted against unseen canaries\' scores) with only the '
    'final model released / with every round\'s model released, then the '
    'lower bounds those scores certify at the stated confidence. ' +
    AUDIT_NOTE)


CLIENT_EMPIRICAL_HEADER = 'eps empirical (updates)'
CLIENT_EMPIRICAL_NOTE = (
    f'{CLIENT_EMPIRICAL_HEADER}: each client\'s (silo\'s) canary examples\' '
    'estimate from every update it sent (mu-GDP fit of inserted against '
    'unseen canaries\' scores): their range, their Spearman rank '
    'correlation with the clients\' printed epsilons, how many lower '
    'bounds at the stated confidence exceed the printed epsilon and how '
    'many alarms fired; per client in <run>/empirical_epsilon.md. ' +
    AUDIT_NOTE)


EXPECTED_NOTE = (
    'expected estimate: what the estimate reads in expectation from the '
    'client\'s noise multiplier, sampling rate and the steps its updates '
    'hold (q sqrt(T) / sqrt(z^2 + q (1 - q) / 2) as mu-GDP); below the '
    'printed epsilon at small q, where a Gaussian fit sees only the '
    'subsampled mechanism\'s mean and variance.')


def client_empirical_cell(summary: dict) -> str:
  """An audit run's per-client estimates in one cell ('-' without)."""
  audit = summary.get('empirical_epsilon')
  if not audit:
    return '-'
  clients = audit['clients']
  estimates = [c['estimate'] for c in clients]
  rho = audit['rank_correlation']
  over = sum(c['lower_bound'] > c['epsilon_spent'] for c in clients)
  caps = [c['lower_bound_capacity'] for c in clients]
  return (f'{min(estimates):.3g} - {max(estimates):.3g}, rank corr. '
          + ('-' if rho is None else f'{rho:.2f}')
          + f', {over} bounds above (max {min(caps):.3g}), '
          + (f"{audit['alarms']} ALARMS" if audit['alarms'] else '0 alarms'))


def client_empirical_record(summary: dict) -> dict:
  """An audit run's numbers for results.csv."""
  audit = summary['empirical_epsilon']
  clients = audit['clients']
  estimates = [c['estimate'] for c in clients]
  return {'empirical_epsilon_min': min(estimates),
          'empirical_epsilon_max': max(estimates),
          'empirical_rank_correlation': audit['rank_correlation'],
          'lower_bounds_above_spent': sum(
              c['lower_bound'] > c['epsilon_spent'] for c in clients),
          'lower_bound_capacity': min(c['lower_bound_capacity']
                                      for c in clients),
          'audit_alarms': audit['alarms'],
          'canaries_per_client': summary['canaries']['per_client'],
          'lower_bound_confidence': summary['canaries']['confidence']}


def write_client_empirical_table(run_dir: str, summary: dict,
                                 client_ids) -> None:
  """`<run_dir>/empirical_epsilon.{md,csv}`: an audit run's printed epsilon,
  estimate and lower bound per client (silo)."""
  rows, records = [], []
  for client, c in zip(client_ids, summary['empirical_epsilon']['clients']):
    rows.append([str(client), f"{c['epsilon_spent']:.3g}",
                 f"{c['estimate']:.3g}", f"{c['expected_estimate']:.3g}",
                 f"{c['lower_bound']:.3g}",
                 f"{c['estimate_lower_limit']:.3g}" + (
                     ' ALARM' if c['alarm'] else '')])
    records.append({'client': client, **c})
  write_table(run_dir, ['client', 'eps spent', 'eps empirical',
                        'expected estimate', 'lower bound',
                        'estimate\'s lower limit'], rows,
              stem='empirical_epsilon',
              caption=CLIENT_EMPIRICAL_NOTE + ' ' + EXPECTED_NOTE,
              records=records)


def audit_alarms(summary: dict) -> list[str]:
  """One line for each group or client whose audit refutes its printed
  epsilon (`empirical_epsilon.alarm`); none for a run without canaries."""
  lines = []
  for g in summary.get('groups', ()):
    if g.get('audit_alarm'):
      limit = g['empirical_epsilon']['final_model']
      lines.append(
          f"AUDIT ALARM: {summary['configuration']}, group {g['name']}: the "
          f"estimate's {limit['alarm_confidence']:.4g} lower limit "
          f"{limit['estimate_lower_limit']:.3g} is above the printed epsilon "
          f"{g['epsilon_spent']:.3g}: the noise is not what the ledger says.")
  audit = summary.get('empirical_epsilon') or {}
  for i, c in enumerate(audit.get('clients', ())):
    if c['alarm']:
      lines.append(
          f"AUDIT ALARM: {summary['configuration']}, client {i}: the "
          f"estimate's {c['alarm_confidence']:.4g} lower limit "
          f"{c['estimate_lower_limit']:.3g} is above the printed epsilon "
          f"{c['epsilon_spent']:.3g}: the noise is not what the ledger says.")
  return lines


def accountant_note(summary: dict) -> list[str]:
  """The line naming the bound a trusted run's epsilons are (summary.json's
  `accountant`), with RDP's for the same run where the PLD's is printed."""
  if summary.get('accountant') != 'pld':
    return []
  rdp = ', '.join(f'{g["name"]} {g["epsilon_spent_rdp"]:.4g}'
                  for g in summary['groups'] if 'epsilon_spent_rdp' in g)
  return [f'Accountant: PLD (dp_accounting, pessimistic, discretization '
          f'{summary["pld_discretization"]:g}), an upper bound; RDP\'s looser '
          f'bound on the same run ({summary["configuration"]}): {rdp} '
          '(summary.json: epsilon_spent_rdp).']


def table_notes(release_unprotected: bool, metric: str = 'accuracy',
                audited: bool = False,
                summary: dict | None = None) -> list[str]:
  """What the results table's cells mean, printed above it; `metric` is the
  task's (an MSE's variance is shown as it is, `metric_cell`); `audited`: a
  canary run's table; `summary`, a configuration's summary.json, names the
  accountant."""
  variance = (VARIANCE_NOTE if metric in _PERCENT_METRICS else
              'In parentheses: variance across clients of their '
              f'{metric}, in its units squared.')
  return [variance, EPSILON_NOTE] + (
      accountant_note(summary) + group_note(summary) if summary else []) + (
          [EMPIRICAL_NOTE] if audited else []) + (
              [] if release_unprotected else [WITHHELD_NOTE])


def write_table(output_dir: str, header, rows, stem: str = 'results',
                caption: str | None = None,
                records: Sequence[dict] | None = None) -> None:
  """`<stem>.md` (with `caption` above the table) and `<stem>.csv`.

  `records` are the table's numbers, one dict per row and one column per
  number (e.g. a mean and its variance apart), for the CSV that tools read;
  without them the CSV holds the table's cells. A file that cannot be
  written does not keep the other from being written: the first `OSError`
  is raised after both were tried.
  """

  def write_markdown(f):
    if caption:
      f.write(caption.rstrip('\n') + '\n\n')
    f.write(markdown_table(header, rows) + '\n')

  def write_csv(f):
    if records is None:
      csv.writer(f).writerows([list(header)] + [list(r) for r in rows])
      return
    columns = list(dict.fromkeys(k for r in records for k in r))
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    writer.writerows({k: '' if v is None else v for k, v in r.items()}
                     for r in records)

  os.makedirs(output_dir, exist_ok=True)
  errors = []
  for suffix, write in (('md', write_markdown), ('csv', write_csv)):
    path = os.path.join(output_dir, f'{stem}.{suffix}')
    try:
      with open(path, 'w', newline='') as f:
        write(f)
    except OSError as e:
      e.filename = e.filename or path  # a failed write (disk full) names none
      errors.append(e)
  if errors:
    raise errors[0]


def print_and_write_table(output_dir: str, header, rows,
                          caption: str | None = None,
                          records: Sequence[dict] | None = None,
                          alarms: Sequence[str] = (),
                          heading: str | None = None) -> None:
  """A command's results table: printed (its `heading`, the run's task,
  rounds and sampling, and caption above, the audit's `alarms` below) and
  written as `write_table` writes it, the heading first in `results.md`, so
  the file says what was run as the terminal did."""
  if heading:
    print(f'\n{heading}\n')
  if caption:
    print(caption + '\n')
  print(markdown_table(header, rows))
  write_table(output_dir, header, rows,
              caption='\n\n'.join(c for c in (heading, caption) if c) or None,
              records=records)
  for line in alarms:
    print(line)


def client_accountant_note(summary: dict) -> list[str]:
  """The line naming the bound an untrusted or cross-silo run's epsilons
  are (summary.json's `accountant`), with RDP's for the same run where the
  PLD's is printed."""
  if summary.get('accountant') != 'pld':
    return []
  return [f'Accountant: PLD (dp_accounting, pessimistic; discretization per '
          f'client in summary.json), an upper bound; RDP\'s looser bound on '
          f'the same run ({summary["configuration"]}): '
          f'{summary["epsilon_spent_rdp_min"]:.3g} - '
          f'{summary["epsilon_spent_rdp_max"]:.3g} (summary.json: '
          'epsilon_spent_rdp_min, _max).']


def print_and_write_client_table(output_dir: str, header, rows,
                                 records: Sequence[dict], audited: bool,
                                 alarms: Sequence[str], heading: str,
                                 summary: dict | None = None) -> None:
  """`print_and_write_table` for the untrusted and cross-silo settings,
  whose audits are per client (silo): their note stands above an audited
  table, below the accountant's (`summary`, a run's summary.json)."""
  notes = (client_accountant_note(summary) if summary else []) + (
      [CLIENT_EMPIRICAL_NOTE] if audited else [])
  print_and_write_table(output_dir, header, rows, records=records,
                        caption='\n'.join(notes) if notes else None,
                        alarms=alarms, heading=heading)


_PERCENT_METRICS = ('accuracy', 'sign_accuracy')


def metric_prefix(metric: str) -> str:
  """What tables call a task's metric (`FederatedTask.metric`): Acc, in %,
  or MSE."""
  return 'Acc' if metric in _PERCENT_METRICS else 'MSE'


def metric_cell(metric: str, mean, var=None) -> str:
  """A value of `metric` as tables print it: '-' if withheld, accuracies to
  two decimals with their variance in the papers' scale (`VARIANCE_NOTE`),
  other metrics to four significant digits with their variance as is."""
  if mean is None:
    return '-'
  percent = metric in _PERCENT_METRICS
  text = f'{mean:.2f}' if percent else f'{mean:.4g}'
  if var is None:
    return text
  return f'{text} ({var * (0.01 if percent else 1.0):.3g})'


def _eps(summary: dict, group: dict) -> str:
  """A group's epsilon cell: the spend, or why there is none."""
  if group['target_epsilon'] is None:
    return 'none (opt-out)' if group['name'] == 'opt_out' else 'not private'
  if not summary.get('privacy_accounted', True):
    return 'not accounted (realized denominator)'
  value = group['epsilon_spent']
  return f'{value:.3g} ({group["target_epsilon"]:g})'


_AUDITS = (('final', 'final_model'), ('all_rounds', 'all_rounds'))


def _empirical(summary: dict) -> str:
  """A canary run's estimates per private group, final model / all rounds,
  with the lower bounds at the run's confidence ('-' without canaries)."""
  cells = []
  for g in summary['groups']:
    audit = g.get('empirical_epsilon')
    if audit:
      est = ' / '.join(f"{audit[k]['estimate']:.3g}" for _, k in _AUDITS)
      low = ' / '.join(f"{audit[k]['lower_bound']:.3g}" for _, k in _AUDITS)
      cap = audit['final_model']['lower_bound_capacity']
      cells.append(f"{g['name']}: {est} (bound {low}, max {cap:.3g})" +
                   (' ALARM' if g['audit_alarm'] else ''))
  return ', '.join(cells) or '-'


def _accounting(summary: dict) -> str:
  """How the run was sampled and its private means divided."""
  return (f"{summary.get('sampling', 'poisson')}, "
          f"{summary.get('denominator', 'expected')}")


# Beside the name of a run none of whose groups has a target epsilon
# (nonprivate), so that the row says what it is wherever it is read.
NO_GUARANTEE_LABEL = 'no DP guarantee'


def privacy_guarantee(summary: dict) -> str:
  """'none' for a run with no private group, 'not accounted' for one whose
  denominators no accountant covers, else 'accounted'."""
  if all(g['target_epsilon'] is None for g in summary['groups']):
    return 'none'
  if not summary.get('privacy_accounted', True):
    return 'not accounted'
  return 'accounted'


PAPER_NAMES = {'nonprivate': 'Non-Private', 'dp_fedavg': 'DP-FedAvg',
               'fedhdp': 'FedHDP'}


def _hyperparameters(summary: dict) -> str:
  """The papers' "hyperparameters" cell: r and the Ditto lambdas in use."""
  parts = []
  levels = [g.get('ratio', 1.0) for g in summary.get('groups', ())
            if g.get('target_epsilon') is not None]
  if summary.get('ratio') is not None:
    parts.append(f"r={summary['ratio']:g}")
  elif any(r != 1 for r in levels):  # each level's own (noise-aware or given)
    parts.append('r_j=' + '/'.join(f'{r:.3g}' for r in levels))
  ditto = summary.get('ditto')
  if ditto:
    lam_p, lam_np = ditto['lambda_p'], ditto['lambda_np']
    if ditto.get('noise_aware'):
      parts.append('lambda_j (noise-aware)=' + '/'.join(
          f'{v:.3g}' for v in ditto['group_lambdas'].values()))
    elif ditto.get('level_lambdas') and summary['algorithm'] != 'nonprivate':
      parts.append('lambda_j=' + '/'.join(
          f'{v:g}' for v in ditto['level_lambdas'].values()) +
                   f', lambda_np={lam_np:g}')
    elif summary['algorithm'] == 'nonprivate':
      parts.append(f'lambda_np={lam_np:g}')
    elif summary['algorithm'] == 'dp_fedavg':
      parts.append(f'lambda_p={lam_p:g}')
    elif lam_p == lam_np:
      parts.append(f'lambda_p=lambda_np={lam_p:g}')
    else:
      parts.append(f'lambda_p={lam_p:g}, lambda_np={lam_np:g}')
  return ', '.join(parts) or '-'


def _published(figures: Sequence[float]) -> str:
  if not figures:
    return '-'
  low, high = min(figures), max(figures)
  return f'{low:g}' if low == high else f'{low:g}-{high:g}'


def results_table(summaries: Sequence[dict], paper_layout: bool = False,
                  published: Callable[[dict], Sequence[float]] | None = None):
  """SPEC.md §1 metrics, variance across clients in parentheses.

  The metric is named as the task scores it (Acc_g in %, or MSE_g).
  Accuracy variances are shown in the papers' scale (`VARIANCE_NOTE`; other
  metrics, e.g. MSE, as they are). `paper_layout` names the algorithms as
  the papers do and adds their "hyperparameters" column (r, Ditto lambdas).
  `published(summary)` gives the papers' Acc_g for a run (a range where
  their Ditto blocks differ) for a last column beside the measured one.
  """
  personalized = any(s['metrics'].get('acc_l_p') is not None or
                     s['metrics'].get('acc_l_np') is not None
                     for s in summaries)
  levels = _level_metric_keys(summaries)
  name = metric_prefix(summaries[0].get('metric', 'accuracy') if summaries
                       else 'accuracy')
  groups = label_groups(summaries)
  group_keys = _group_keys(summaries)
  header = ['Algorithm'] + (['hyperparameters'] if paper_layout else [])
  header += [f'{name}_g']
  if groups:
    header += [f'{name}_g,worst'] + [f'{name}_g[{g}]' for g in groups]
  header += [f'{name}_g,p', f'{name}_g,np', 'Delta_g']
  if personalized:
    header += [f'{name}_l,p', f'{name}_l,np', 'Delta_l']
  header += [f'{name}_l,{_level_label(k)}' for k in levels]
  audited = any(s.get('canaries') for s in summaries)
  header += ['eps spent (target) per group']
  if audited:
    header += [EMPIRICAL_HEADER]
  header += ['sampling, denominator', 'seconds']
  if published:
    header += [f'published {name}_g']
  rows = []
  for s in summaries:
    m = s['metrics']
    cell = functools.partial(metric_cell, s.get('metric', 'accuracy'))
    eps = ', '.join(f"{g['name']}: {_eps(s, g)}" for g in s['groups'])
    name = (PAPER_NAMES.get(s['algorithm'], s['algorithm']) if paper_layout
            else s['configuration'])
    if privacy_guarantee(s) == 'none':
      name += f' ({NO_GUARANTEE_LABEL})'
    row = [name, _hyperparameters(s)] if paper_layout else [name]
    row += [cell(m.get(key)) for key in ('acc_g', *group_keys)]
    row += [
        cell(m.get('acc_g_p'), m.get('var_g_p')),
        cell(m.get('acc_g_np'), m.get('var_g_np')),
        cell(m.get('delta_g')),
    ]
    if personalized:
      row += [cell(m.get('acc_l_p'), m.get('var_l_p')),
              cell(m.get('acc_l_np'), m.get('var_l_np')),
              cell(m.get('delta_l'))]
    row += [cell(m.get(k)) for k in levels]
    row += [eps] + ([_empirical(s)] if audited else [])
    row += [_accounting(s), f"{s['seconds']:.0f}"]
    if published:
      row.append(_published(published(s)))
    rows.append(row)
  return header, rows


def group_note(summary: dict) -> list[str]:
  """The line saying what the per-group columns are, and each group's
  labels, for a run whose groups were scored on their labels."""
  labels = summary.get('group_labels')
  if not labels:
    return []
  name = metric_prefix(summary.get('metric', 'accuracy'))
  return [f'{name}_g[group]: the final model\'s accuracy on the server\'s '
          'test examples of the labels of the group\'s bands '
          '(--levels_by_label), which are public, so it costs no privacy: ' +
          '; '.join(f'{g} {_label_ranges(ls)}' for g, ls in labels.items()) +
          f'. {name}_g,worst: the lowest of them.']


def _label_ranges(labels: Sequence[int]) -> str:
  """[0, 1, 2, 3, 7] as '0-3, 7'."""
  runs = []
  for label in sorted(labels):
    if runs and label == runs[-1][1] + 1:
      runs[-1][1] = label
    else:
      runs.append([label, label])
  return ', '.join(f'{a}' if a == b else f'{a}-{b}' for a, b in runs)


def label_groups(summaries: Sequence[dict]) -> list[str]:
  """The privacy groups scored on their labels in any of `summaries`
  (summary.json's `group_labels`), in order."""
  return list(dict.fromkeys(g for s in summaries
                            for g in s.get('group_labels') or ()))
def _level_metric_keys(summaries: Sequence[dict]) -> list[str]:
  """The per-level personalized metrics the summaries hold (released with
  --release_unprotected_stats only), each level in its run's order, the
  worst level's last."""
  keys = dict.fromkeys(
      k for s in summaries for k in s['metrics']
      if k.startswith(release_policy.LEVEL_PERSONAL_PREFIX))
  worst = any(release_policy.WORST_LEVEL_PERSONAL in s['metrics']
              for s in summaries)
  return list(keys) + ([release_policy.WORST_LEVEL_PERSONAL] if worst
                       else [])


def _level_label(key: str) -> str:
  """A per-level column's label: the level's epsilon name, or the worst."""
  if key == release_policy.WORST_LEVEL_PERSONAL:
    return 'worst level'
  level = key[len(release_policy.LEVEL_PERSONAL_PREFIX):]
  return level.removeprefix('private_')


_METRIC_KEYS = ('acc_g', 'acc_g_p', 'var_g_p', 'acc_g_np', 'var_g_np',
                'delta_g', 'acc_l_p', 'var_l_p', 'acc_l_np', 'var_l_np',
                'delta_l')


def _group_keys(summaries: Sequence[dict]) -> list[str]:
  """The metrics keys of the worst group's and each group's Acc_g on its
  labels, where any of `summaries` has them."""
  groups = label_groups(summaries)
  if not groups:
    return []
  return [metrics_lib.WORST_GROUP_COLUMN] + [
      metrics_lib.GROUP_COLUMN.format(group=g) for g in groups]


def results_records(summaries: Sequence[dict],
                    published: Callable[[dict], Sequence[float]] | None = None
                    ) -> list[dict]:
  """`results_table`'s numbers for results.csv, one column each.

  Means and variances are apart and unscaled, as in rounds.csv: variances in
  the metric's units squared (%^2 for accuracy); metric columns are named by
  the task's metric (acc_g, or mse_g); each group has its epsilon spent,
  target and delta; `privacy_guarantee` says whether the run has one.
  """
  records = []
  group_keys = _group_keys(summaries)
  for s in summaries:
    prefix = metric_prefix(s.get('metric', 'accuracy')).lower()
    ditto = s.get('ditto') or {}
    record = {'configuration': s['configuration'],
              'algorithm': s['algorithm'], 'ratio': s.get('ratio'),
              'lambda_p': ditto.get('lambda_p'),
              'lambda_np': ditto.get('lambda_np'),
              'privacy_guarantee': privacy_guarantee(s)}
    for key in ('acc_g', *group_keys, *_METRIC_KEYS[1:],
                *_level_metric_keys([s])):
      record[key.replace('acc_', f'{prefix}_')] = s['metrics'].get(key)
    for group, lam in ditto.get('group_lambdas', {}).items():
      record[f'lambda_{group}'] = lam
    for g in s['groups']:
      record[f"epsilon_spent_{g['name']}"] = g.get('epsilon_spent')
      record[f"target_epsilon_{g['name']}"] = g.get('target_epsilon')
      record[f"delta_{g['name']}"] = g.get('delta')
      for label, key in _AUDITS if g.get('empirical_epsilon') else ():
        audit = g['empirical_epsilon'][key]
        record[f"empirical_epsilon_{label}_{g['name']}"] = audit['estimate']
        record[f"empirical_lower_bound_{label}_{g['name']}"] = (
            audit['lower_bound'])
      if g.get('empirical_epsilon'):
        audit = g['empirical_epsilon']
        record[f"empirical_lower_limit_{g['name']}"] = (
            audit['final_model']['estimate_lower_limit'])
        record[f"lower_bound_capacity_{g['name']}"] = (
            audit['final_model']['lower_bound_capacity'])
        record[f"audit_alarm_{g['name']}"] = g['audit_alarm']
    if s.get('canaries'):
      record.update(canaries_per_group=s['canaries']['per_group'],
                    lower_bound_confidence=s['canaries']['confidence'])
    record.update(sampling=s.get('sampling', 'poisson'),
                  denominator=s.get('denominator', 'expected'),
                  seconds=s['seconds'])
    if published:
      figures = published(s)
      record[f'published_{prefix}_g_min'] = min(figures) if figures else None
      record[f'published_{prefix}_g_max'] = max(figures) if figures else None
    records.append(record)
  return records

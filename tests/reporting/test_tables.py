"""The results table: the papers' variance scale and layout."""

import csv
import os

from tff_hdp.reporting import published
from tff_hdp.reporting import tables


def _summary(algorithm, ratio=None, metric='accuracy', ditto=None):
  name = algorithm if ratio is None else f'{algorithm}_r{ratio:g}'
  return {
      'configuration': name, 'algorithm': algorithm, 'ratio': ratio,
      'metric': metric, 'ditto': ditto, 'seconds': 1.0,
      'groups': [{'name': 'all_non_private', 'target_epsilon': None,
                  'epsilon_spent': None}] if algorithm == 'nonprivate' else [
                     {'name': 'p', 'target_epsilon': 3.6,
                      'epsilon_spent': 3.59},
                     {'name': 'opt_out', 'target_epsilon': None,
                      'epsilon_spent': None}],
      'metrics': {'acc_g': 90.0, 'acc_g_p': 88.64, 'var_g_p': 39.0,
                  'acc_g_np': 93.75, 'var_g_np': 0.1, 'delta_g': 5.11},
  }


def test_accuracy_variance_is_shown_in_the_papers_scale():
  # FeO2 Table 4 prints 88.64(0.39): Var[acc in %] = 39 -> 0.39.
  _, rows = tables.results_table([_summary('dp_fedavg')])
  assert rows[0][2:4] == ['88.64 (0.39)', '93.75 (0.001)']


def test_bernoulli_clients_give_the_papers_skewed_r0_value():
  # Skewed non-IID MNIST, r = 0: 7.1% of private clients score 100%, the
  # rest 0%; the papers print 7.1(6.5), i.e. 100 p (1 - p).
  p = 0.0705
  s = _summary('fedhdp', 0.0)
  s['metrics'].update(acc_g_p=100 * p, var_g_p=(100.0**2) * p * (1 - p))
  _, rows = tables.results_table([s])
  assert rows[0][2] == '7.05 (6.55)'


def test_other_metrics_keep_their_variance_and_their_name():
  s = _summary('fedhdp', 1.0, metric='mse')
  s['metrics'].update(acc_g=0.04123, delta_g=-0.0012)
  header, rows = tables.results_table([s])
  assert header[1:5] == ['MSE_g', 'MSE_g,p', 'MSE_g,np', 'Delta_g']
  assert rows[0][1:5] == ['0.04123', '88.64 (39)', '93.75 (0.1)', '-0.0012']


def test_results_csv_holds_numbers_one_column_each(tmp_path):
  s = _summary('fedhdp', 0.1)
  s['groups'] = [{'name': 'private_eps3.6', 'target_epsilon': 3.6,
                  'delta': 1e-4, 'epsilon_spent': 3.59},
                 {'name': 'opt_out', 'target_epsilon': None, 'delta': None,
                  'epsilon_spent': None}]
  s['metrics'].pop('acc_g_p')  # withheld: a blank cell, not a number
  header, rows = tables.results_table([s])
  tables.write_table(str(tmp_path), header, rows,
                     records=tables.results_records([s]))
  with open(tmp_path / 'results.csv', newline='') as f:
    (record,) = list(csv.DictReader(f))
  assert record['configuration'] == 'fedhdp_r0.1'
  assert float(record['ratio']) == 0.1
  assert float(record['acc_g']) == 90.0
  assert record['acc_g_p'] == '' and float(record['var_g_p']) == 39.0
  assert float(record['acc_g_np']) == 93.75
  assert float(record['epsilon_spent_private_eps3.6']) == 3.59
  assert float(record['target_epsilon_private_eps3.6']) == 3.6
  assert record['epsilon_spent_opt_out'] == ''
  assert float(record['seconds']) == 1.0
  mse = tables.results_records([_summary('fedhdp', 1.0, metric='mse')])[0]
  assert mse['mse_g'] == 90.0 and 'acc_g' not in mse


def test_paper_layout_names_algorithms_and_hyperparameters():
  ditto = {'lambda_p': 0.05, 'lambda_np': 0.005, 'learning_rate': 0.1}
  same = dict(ditto, lambda_np=0.05)
  header, rows = tables.results_table(
      [_summary('nonprivate', ditto=ditto), _summary('dp_fedavg', ditto=ditto),
       _summary('fedhdp', 0.01, ditto=ditto), _summary('fedhdp', 1, ditto=same),
       _summary('fedhdp', 0.1)], paper_layout=True)
  assert header[:3] == ['Algorithm', 'hyperparameters', 'Acc_g']
  assert [r[:2] for r in rows] == [
      ['Non-Private (no DP guarantee)', 'lambda_np=0.005'],
      ['DP-FedAvg', 'lambda_p=0.05'],
      ['FedHDP', 'r=0.01, lambda_p=0.05, lambda_np=0.005'],
      ['FedHDP', 'r=1, lambda_p=lambda_np=0.05'],
      ['FedHDP', 'r=0.1']]
  header, rows = tables.results_table([_summary('fedhdp', 0.1)])
  assert header[:2] == ['Algorithm', 'Acc_g'] and rows[0][0] == 'fedhdp_r0.1'


def test_write_table_puts_the_caption_above_the_markdown_only(tmp_path):
  tables.write_table(str(tmp_path), ['a', 'b'], [[1, 2]],
                        caption=tables.VARIANCE_NOTE)
  text = (tmp_path / 'results.md').read_text()
  assert text.startswith(tables.VARIANCE_NOTE + '\n\n| a')
  with open(os.path.join(tmp_path, 'results.csv'), newline='') as f:
    assert list(csv.reader(f)) == [['a', 'b'], ['1', '2']]


def test_results_md_says_what_ran_as_the_terminal_does(tmp_path, capsys):
  """The heading (task, rounds, sampling) is printed above the table and
  written first in results.md, the caption after it."""
  heading = 'digits: 30 clients, 3 rounds, 20 clients per round (poisson)'
  tables.print_and_write_table(str(tmp_path), ['a'], [[1]],
                               caption=tables.VARIANCE_NOTE, heading=heading)
  printed = capsys.readouterr().out
  assert printed.startswith(f'\n{heading}\n\n{tables.VARIANCE_NOTE}\n\n| a')
  text = (tmp_path / 'results.md').read_text()
  assert text.startswith(f'{heading}\n\n{tables.VARIANCE_NOTE}\n\n| a')


def test_published_column_shows_the_figure_or_range_of_the_papers():
  block = {'lambda_p': 0.005, 'lambda_np': 0.005, 'learning_rate': 0.1}
  header, rows = tables.results_table(
      [_summary('fedhdp', 0.01, ditto=block), _summary('dp_fedavg'),
       _summary('fedhdp', 0.5)], paper_layout=True,
      published=lambda s: published.summary_acc_g('mnist_noniid', s))
  assert header[-1] == 'published Acc_g'
  # FeO2 Table 4: 92.48 in the 0.005 block; DP-FedAvg 87.98-88.75 over the
  # blocks; r = 0.5 is not in the paper's grid.
  assert [r[-1] for r in rows] == ['92.48', '87.98-88.75', '-']


def test_epsilon_cells_name_why_a_group_has_no_epsilon():
  nonprivate = _summary('nonprivate')
  fedhdp = dict(_summary('fedhdp', 0.1), sampling='fixed', groups=[
      {'name': 'p', 'target_epsilon': 3.6, 'epsilon_spent': 3.59},
      {'name': 'opt_out', 'target_epsilon': None, 'epsilon_spent': None}])
  header, rows = tables.results_table([nonprivate, fedhdp])
  col = header.index('eps spent (target) per group')
  assert rows[0][col] == 'all_non_private: not private'
  assert rows[1][col] == 'p: 3.59 (3.6), opt_out: none (opt-out)'
  assert [r[header.index('sampling, denominator')] for r in rows] == [
      'poisson, expected', 'fixed, expected']


def test_a_run_without_guarantee_says_so_in_its_row_and_record(tmp_path):
  """nonprivate stays beside the private runs, labelled in the table's own
  cell and in results.csv, not only in a caption."""
  realized = dict(_summary('fedhdp', 0.1), privacy_accounted=False)
  summaries = [_summary('nonprivate'), _summary('fedhdp', 0.1), realized]
  _, rows = tables.results_table(summaries)
  assert [r[0] for r in rows] == ['nonprivate (no DP guarantee)',
                                  'fedhdp_r0.1', 'fedhdp_r0.1']
  _, rows = tables.results_table(summaries[:1], paper_layout=True)
  assert rows[0][0] == 'Non-Private (no DP guarantee)'
  tables.write_table(str(tmp_path), *tables.results_table(summaries),
                     records=tables.results_records(summaries))
  with open(tmp_path / 'results.csv', newline='') as f:
    records = list(csv.DictReader(f))
  assert [(r['configuration'], r['privacy_guarantee']) for r in records] == [
      ('nonprivate', 'none'), ('fedhdp_r0.1', 'accounted'),
      ('fedhdp_r0.1', 'not accounted')]
  assert '| nonprivate (no DP guarantee) |' in (
      tmp_path / 'results.md').read_text()


def test_groups_scored_on_their_labels_get_columns_beside_acc_g(tmp_path):
  """The worst group's accuracy and each group's on its labels follow
  Acc_g, in the table, results.csv and the notes (which say each group's
  labels); a run without public labels has none of them."""
  s = _summary('fedhdp', 1.0)
  s['group_labels'] = {'private_eps1': [0, 1, 2, 3, 7],
                       'opt_out': [8, 9]}
  s['metrics'].update(acc_g_worst=18.9, acc_g_group_private_eps1=18.9,
                      acc_g_group_opt_out=92.6)
  header, rows = tables.results_table([s, _summary('dp_fedavg')])
  assert header[1:5] == ['Acc_g', 'Acc_g,worst', 'Acc_g[private_eps1]',
                         'Acc_g[opt_out]']
  assert rows[0][1:5] == ['90.00', '18.90', '18.90', '92.60']
  assert rows[1][1:5] == ['90.00', '-', '-', '-']
  (note,) = tables.group_note(s)
  assert 'private_eps1 0-3, 7; opt_out 8-9.' in note
  assert note in tables.table_notes(False, summary=s)
  records = tables.results_records([s])
  assert list(records[0])[6:10] == ['acc_g', 'acc_g_worst',
                                    'acc_g_group_private_eps1',
                                    'acc_g_group_opt_out']
  assert records[0]['acc_g_worst'] == 18.9
  header, _ = tables.results_table([_summary('fedhdp', 1.0)])
  assert not any('worst' in h or '[' in h for h in header)
  assert 'acc_g_worst' not in tables.results_records([_summary('fedhdp')])[0]
  assert tables.group_note(_summary('fedhdp')) == []
def test_each_levels_personal_accuracy_and_the_worst_get_columns(tmp_path):
  s = _summary('fedhdp', ditto={
      'lambda_p': None, 'lambda_np': 0.1, 'learning_rate': 0.1,
      'level_lambdas': {'private_eps1': 1.0, 'private_eps10': 0.2},
      'group_lambdas': {'private_eps1': 1.0, 'private_eps10': 0.2,
                        'opt_out': 0.1}})
  s['metrics'].update(acc_l_p=90.0, acc_l_np=95.0,
                      acc_l_level_private_eps1=85.0,
                      acc_l_level_private_eps10=97.5,
                      acc_l_worst_level=85.0)
  header, rows = tables.results_table([s, _summary('dp_fedavg')])
  at = header.index('Acc_l,eps1')
  assert header[at:at + 3] == ['Acc_l,eps1', 'Acc_l,eps10',
                               'Acc_l,worst level']
  assert rows[0][at:at + 3] == ['85.00', '97.50', '85.00']
  assert rows[1][at:at + 3] == ['-', '-', '-']
  record = tables.results_records([s])[0]
  assert record['acc_l_level_private_eps1'] == 85.0
  assert record['acc_l_worst_level'] == 85.0
  assert record['lambda_private_eps1'] == 1.0 and record[
      'lambda_opt_out'] == 0.1
  _, paper_rows = tables.results_table([s], paper_layout=True)
  assert 'lambda_j=1/0.2, lambda_np=0.1' in paper_rows[0][1]


def test_noise_aware_lambdas_fill_the_hyperparameters_cell():
  s = _summary('fedhdp', ditto={
      'lambda_p': None, 'lambda_np': None, 'learning_rate': 0.1,
      'noise_aware': True, 'local_share': 0.5, 'heterogeneity': 1.0,
      'group_lambdas': {'private_eps1': 0.5241, 'opt_out': 1.0}})
  _, rows = tables.results_table([s], paper_layout=True)
  assert 'lambda_j (noise-aware)=0.524/1' in rows[0][1]
  # No published block has lambdas per level; without them r=0.01 has one.
  s.update(configuration='fedhdp_r0.01', ratio=0.01)
  assert published.summary_acc_g('mnist_noniid', s) == []
  assert published.summary_acc_g('mnist_noniid', dict(s, ditto=None))

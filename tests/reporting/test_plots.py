"""Figures drawn from run folders like the training loop writes them."""

import csv
import json
import math
import os

import matplotlib
matplotlib.use('Agg')
from matplotlib import image  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tff_hdp.reporting import plots  # noqa: E402


def _write_run(path, algorithm, ratio, acc_by_round, epsilons, final):
  """A run folder: rounds.csv (blank where not evaluated) and summary.json."""
  os.makedirs(path)
  cols = ['round', 'acc_g'] + [f'epsilon_{g}' for g in epsilons]
  with open(os.path.join(path, 'rounds.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(cols)
    for i, acc in enumerate(acc_by_round):
      writer.writerow([i + 1, '' if acc is None else acc] +
                      [eps[i] for eps in epsilons.values()])
  name = algorithm if ratio is None else f'{algorithm}_r{ratio:g}'
  with open(os.path.join(path, 'summary.json'), 'w') as f:
    json.dump({'configuration': name, 'algorithm': algorithm, 'ratio': ratio,
               'metrics': final}, f)
  return name, str(path)


@pytest.fixture
def runs(tmp_path):
  private = [1.0, 2.0, 3.0]
  return dict([
      _write_run(tmp_path / 'a', 'nonprivate', None, [None, 80, 90],
                 {'all_non_private': ['inf'] * 3}, {'acc_g': 90.0}),
      _write_run(tmp_path / 'b', 'dp_fedavg', None, [None, 60, 70],
                 {'all_private': private}, {'acc_g': 70.0}),
      _write_run(tmp_path / 'c', 'fedhdp', 0.0, [None, 65, 75],
                 {'private_eps3.6': private, 'opt_out': ['inf'] * 3},
                 {'acc_g': 75.0}),
      _write_run(tmp_path / 'd', 'fedhdp', 1.0, [None, 62, 72],
                 {'private_eps3.6': private, 'opt_out': ['inf'] * 3},
                 {'acc_g': 72.0}),
  ])


def _lines(fig):
  return {line.get_label(): line for line in fig.axes[0].lines}


def test_accuracy_vs_rounds_draws_evaluated_rounds_per_run(runs, tmp_path):
  path = str(tmp_path / 'acc.png')
  lines = _lines(plots.accuracy_vs_rounds(runs, path))
  assert set(lines) == set(runs)
  np.testing.assert_array_equal(lines['fedhdp_r0'].get_xdata(), [2, 3])
  np.testing.assert_array_equal(lines['fedhdp_r0'].get_ydata(), [65, 75])
  assert image.imread(path).ndim == 3


def test_epsilon_vs_rounds_names_every_run_on_each_distinct_curve(runs):
  lines = _lines(plots.epsilon_vs_rounds(runs))
  # Opt-out groups (inf) are left out; DP-FedAvg and FedHDP's r=0 and r=1
  # spend alike: one line that names all three, not three hidden lines.
  label = ('dp_fedavg: all_private; fedhdp_r0, fedhdp_r1: private_eps3.6 '
           '(identical)')
  assert [k.replace('\n', ' ') for k in lines] == [label]
  (line,) = lines.values()
  np.testing.assert_array_equal(line.get_ydata(), [1, 2, 3])


def test_epsilon_vs_rounds_draws_distinct_spends_apart(tmp_path):
  runs = dict([
      _write_run(tmp_path / 'a', 'fedhdp', 0.5, [None, 1, 2],
                 {'private_eps1': [0.5, 0.8, 1.0],
                  'private_eps3': [1.0, 2.0, 3.0]}, {'acc_g': 2.0}),
      _write_run(tmp_path / 'b', 'dp_fedavg', None, [None, 1, 2],
                 {'all_private': [0.4, 0.7, 1.0]}, {'acc_g': 2.0})])
  lines = plots.epsilon_vs_rounds(runs).axes[0].lines
  assert [line.get_label() for line in lines] == [
      'fedhdp_r0.5: private_eps1', 'fedhdp_r0.5: private_eps3',
      'dp_fedavg: all_private']
  styles = {(line.get_color(), line.get_linestyle()) for line in lines}
  assert len(styles) == 3


def test_many_runs_get_distinct_colors_and_dashes(tmp_path):
  runs = dict(_write_run(tmp_path / str(i), 'fedhdp', i / 10, [1, 2, 3],
                         {}, {'acc_g': 3.0}) for i in range(15))
  lines = plots.accuracy_vs_rounds(runs).axes[0].lines
  assert len(lines) == 15
  assert len({(l.get_color(), l.get_linestyle()) for l in lines}) == 15


def test_accuracy_vs_ratio_keeps_r_zero_and_draws_baselines(runs):
  summaries = [plots.read_summary(d) for d in runs.values()]
  fig = plots.accuracy_vs_ratio(summaries)
  fedhdp, nonprivate, dp_fedavg = fig.axes[0].lines
  np.testing.assert_array_equal(fedhdp.get_xdata(), [0, 1])
  np.testing.assert_array_equal(fedhdp.get_ydata(), [75, 72])
  assert nonprivate.get_ydata()[0] == 90 and nonprivate.get_linestyle() == '--'
  assert dp_fedavg.get_ydata()[0] == 70 and dp_fedavg.get_linestyle() == ':'
  assert fig.axes[0].get_xscale() == 'symlog'


def test_accuracy_vs_ratio_legend_has_an_entry_per_metric_and_algorithm(
    runs):
  metrics = ('acc_g', 'acc_g_np', 'acc_l_np', 'acc_l_p', 'acc_g_p')
  summaries = [plots.read_summary(d) for d in runs.values()]
  for s in summaries:
    s['metrics'] = {m: 50.0 + i for i, m in enumerate(metrics)}
  fig = plots.accuracy_vs_ratio(summaries, metrics=metrics)
  assert len(fig.axes[0].lines) == 5 * 3  # FedHDP and two baselines each
  (legend,) = fig.legends
  # Named as the results table heads them, not by their CSV columns.
  assert [t.get_text() for t in legend.get_texts()] == [
      'Acc_g', 'Acc_g,np', 'Acc_l,np', 'Acc_l,p', 'Acc_g,p', 'FedHDP',
      'Non-Private', 'DP-FedAvg']


@pytest.mark.parametrize('column,label', [
    ('acc_g', 'Acc_g'), ('acc_g_np', 'Acc_g,np'), ('mse_l_p', 'MSE_l,p'),
    ('sign_accuracy', 'sign_accuracy'), ('epsilon_p', 'epsilon_p'),
    ('acc_g_worst', 'Acc_g,worst'),
    ('acc_g_group_private_eps3.6', 'Acc_g[private_eps3.6]'),
    ('acc_g_group_opt_out', 'Acc_g[opt_out]')])
def test_metric_labels_are_the_tables_headers(column, label):
  assert plots.metric_label(column) == label


def test_metric_vs_lambda_sorts_and_checks_lengths(tmp_path):
  path = str(tmp_path / 'lam.png')
  fig = plots.metric_vs_lambda([1, 0, 0.1], {'MR-MTL': [70, 60, 80]}, path)
  line = _lines(fig)['MR-MTL']
  np.testing.assert_array_equal(line.get_xdata(), [0, 0.1, 1])
  np.testing.assert_array_equal(line.get_ydata(), [60, 80, 70])
  assert os.path.getsize(path) > 0
  fig = plots.metric_vs_lambda([0.1, 1], [1.0, 2.0], ylabel='MSE')
  assert fig.axes[0].get_xscale() == 'log' and 'MSE' in _lines(fig)
  with pytest.raises(ValueError, match='2 values for 3 lambdas'):
    plots.metric_vs_lambda([0, 1, 2], [1.0, 2.0])


def test_metric_vs_lambda_draws_references_as_flat_dashed_lines():
  fig = plots.metric_vs_lambda([0.1, 1, 10], {'MR-MTL': [3.0, 1.0, 2.0]},
                               reference={'local (best)': 2.5,
                                          'fedavg (best)': 1.5})
  lines = _lines(fig)
  for label, value in (('local (best)', 2.5), ('fedavg (best)', 1.5)):
    assert lines[label].get_linestyle() == '--'
    assert set(lines[label].get_ydata()) == {value}
  assert lines['MR-MTL'].get_linestyle() == '-'


def test_sweep_plots_writes_three_files(runs, tmp_path):
  paths = plots.sweep_plots(runs, str(tmp_path / 'plots'), prefix='b_')
  assert [os.path.basename(p) for p in paths] == [
      'b_accuracy_vs_rounds.png', 'b_epsilon_vs_rounds.png',
      'b_accuracy_vs_r.png']
  assert all(image.imread(p).shape[0] > 100 for p in paths)


def test_accuracy_by_distribution_draws_a_line_per_rule_with_gaps(tmp_path):
  path = str(tmp_path / 'fig2.png')
  table = {'dist1': {'robust_hdp': 80.0, 'weiavg': 78.0},
           'dist6': {'robust_hdp': 70.0, 'weiavg': None},
           'dist9': {'robust_hdp': 65.0, 'weiavg': 60.0}}
  fig = plots.accuracy_by_distribution(table, path)
  lines = _lines(fig)
  assert set(lines) == {'robust_hdp', 'weiavg'}
  np.testing.assert_array_equal(lines['robust_hdp'].get_ydata(), [80, 70, 65])
  np.testing.assert_array_equal(lines['weiavg'].get_ydata(),
                                [78, math.nan, 60])
  assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
      'dist1', 'dist6', 'dist9']
  assert image.imread(path).shape[0] > 100


def test_read_rounds_blank_cells_are_nan(runs):
  cols = plots.read_rounds(runs['nonprivate'])
  assert math.isnan(cols['acc_g'][0]) and cols['acc_g'][2] == 90
  assert np.isinf(cols['epsilon_all_non_private']).all()


def test_the_frontier_plots_accuracy_against_the_noise_divisor(tmp_path):
  """Frontier runs by t (out of order, one without the worst group's
  accuracy), another rule's run left out: one line per metric through the
  runs' (noise divisor, accuracy), each point named by its t."""
  def run(tilt, divisor, mean, worst=None):
    metrics = {'acc_g': mean, **({'acc_g_worst': worst} if worst else {})}
    return {'algorithm': 'frontier_sampling', 'tilt': tilt,
            'noise_divisor': divisor, 'metrics': metrics}

  summaries = [run(1.0, 80.0, 89.0, 67.0), run(0.0, 26.0, 70.0, 65.0),
               run(0.5, 45.0, 84.0),
               {'algorithm': 'dp_fedavg', 'metrics': {'acc_g': 43.0}}]
  path = str(tmp_path / 'frontier.png')
  fig = plots.accuracy_vs_noise_divisor(summaries, path)
  mean, worst = fig.axes[0].lines
  assert list(mean.get_xdata()) == [26.0, 45.0, 80.0]
  assert list(mean.get_ydata()) == [70.0, 84.0, 89.0]
  assert list(worst.get_xdata()) == [26.0, 80.0]
  assert list(worst.get_ydata()) == [65.0, 67.0]
  labels = [t.get_text() for t in fig.axes[0].texts]
  assert labels.count('t=0.5') == 1 and labels.count('t=1') == 2
  assert image.imread(path).shape[0] > 0

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


def test_epsilon_vs_rounds_one_line_per_distinct_private_spend(runs):
  lines = _lines(plots.epsilon_vs_rounds(runs))
  # Opt-out groups (inf) are left out; FedHDP's r=0 and r=1 share one curve.
  assert set(lines) == {'dp_fedavg: all_private',
                        'fedhdp_r0: private_eps3.6'}
  np.testing.assert_array_equal(
      lines['fedhdp_r0: private_eps3.6'].get_ydata(), [1, 2, 3])


def test_accuracy_vs_ratio_keeps_r_zero_and_draws_baselines(runs):
  summaries = [plots.read_summary(d) for d in runs.values()]
  fig = plots.accuracy_vs_ratio(summaries)
  lines = _lines(fig)
  np.testing.assert_array_equal(lines['FedHDP acc_g'].get_xdata(), [0, 1])
  np.testing.assert_array_equal(lines['FedHDP acc_g'].get_ydata(), [75, 72])
  assert lines['nonprivate acc_g'].get_ydata()[0] == 90
  assert lines['dp_fedavg acc_g'].get_ydata()[0] == 70
  assert fig.axes[0].get_xscale() == 'symlog'


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


def test_sweep_plots_writes_three_files(runs, tmp_path):
  paths = plots.sweep_plots(runs, str(tmp_path / 'plots'), prefix='b_')
  assert [os.path.basename(p) for p in paths] == [
      'b_accuracy_vs_rounds.png', 'b_epsilon_vs_rounds.png',
      'b_accuracy_vs_r.png']
  assert all(image.imread(p).shape[0] > 100 for p in paths)


def test_read_rounds_blank_cells_are_nan(runs):
  cols = plots.read_rounds(runs['nonprivate'])
  assert math.isnan(cols['acc_g'][0]) and cols['acc_g'][2] == 90
  assert np.isinf(cols['epsilon_all_non_private']).all()

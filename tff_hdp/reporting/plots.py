"""Figures of a sweep, drawn from the files the training loop leaves behind.

Every function reads `<run_dir>/rounds.csv` / `summary.json` (or takes plain
numbers), so plots can be redrawn at any time, also for runs still going.
Figures are built with `matplotlib.figure.Figure` and saved with its Agg
canvas: no pyplot state, no display needed. Each function returns the figure
(tests look at its lines) and writes it to `path` when one is given.
"""

from __future__ import annotations

import csv
import json
import math
import os
import textwrap
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tff_hdp import metrics as metrics_lib

_BASELINES = ('nonprivate', 'dp_fedavg')


def read_rounds(run_dir: str) -> dict[str, np.ndarray]:
  """rounds.csv as float columns; blank cells (not evaluated) are NaN."""
  with open(os.path.join(run_dir, 'rounds.csv'), newline='') as f:
    rows = list(csv.DictReader(f))
  if not rows:
    return {}
  return {k: np.array([float(r[k]) if r[k] not in ('', None) else math.nan
                       for r in rows]) for k in rows[0]}


def read_summary(run_dir: str) -> dict:
  with open(os.path.join(run_dir, 'summary.json')) as f:
    return json.load(f)


def _new_axes(title: str | None, xlabel: str, ylabel: str):
  fig = Figure(figsize=(8.4, 4.2), layout='constrained')
  ax = fig.subplots()
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  ax.grid(True, alpha=0.3)
  return fig, ax


def _finish(fig: Figure, ax, path: str | None, handles=None) -> Figure:
  if handles or ax.lines:
    fig.legend(handles=handles, loc='outside right upper', fontsize='small')
  if path:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
  return fig


_LINESTYLES = ('-', '--', ':', '-.')


def metric_label(column: str) -> str:
  """A metric column as the results table heads it: acc_g -> Acc_g,
  acc_g_np -> Acc_g,np, mse_l_p -> MSE_l,p, acc_g_group_opt_out ->
  Acc_g[opt_out] (other columns as they are)."""
  parts = column.split('_')
  names = {'acc': 'Acc', 'mse': 'MSE'}
  if len(parts) < 2 or parts[0] not in names or parts[1] not in ('g', 'l'):
    return column
  if parts[2:3] == ['group'] and parts[3:]:
    return f'{names[parts[0]]}_{parts[1]}[{"_".join(parts[3:])}]'
  return f'{names[parts[0]]}_{parts[1]}' + (
      ',' + ','.join(parts[2:]) if parts[2:] else '')


def _style(i: int) -> dict:
  """The i-th line's color and dash: ten colors, then the next dash, so
  that no two of up to 40 lines look alike."""
  return {'color': f'C{i % 10}', 'linestyle': _LINESTYLES[i // 10 % 4]}


def accuracy_vs_rounds(run_dirs: Mapping[str, str], path: str | None = None,
                       metric: str = 'acc_g',
                       title: str | None = None) -> Figure:
  """`metric` at each evaluated round, one line per labelled run."""
  fig, ax = _new_axes(title, 'round', f'{metric_label(metric)} (%)')
  for i, (label, run_dir) in enumerate(run_dirs.items()):
    cols = read_rounds(run_dir)
    if metric not in cols:
      continue
    keep = ~np.isnan(cols[metric])
    ax.plot(cols['round'][keep], cols[metric][keep], marker='.', label=label,
            **_style(i))
  return _finish(fig, ax, path)


def epsilon_vs_rounds(run_dirs: Mapping[str, str], path: str | None = None,
                      title: str | None = None) -> Figure:
  """Each privacy group's epsilon spent by round (opt-out groups have none).

  Runs whose groups spend alike (e.g. FedHDP at every r, and DP-FedAvg at the
  same target) would hide each other's lines: each distinct curve is drawn
  once, labelled with every run and group on it and "(identical)".
  """
  fig, ax = _new_axes(title, 'round', 'epsilon spent')
  curves = {}  # spend -> (rounds, {group: [runs]})
  for label, run_dir in run_dirs.items():
    cols = read_rounds(run_dir)
    for column, values in cols.items():
      if not column.startswith('epsilon_') or not np.isfinite(values).all():
        continue
      key = tuple(np.round(values, 9))
      _, groups = curves.setdefault(key, (cols['round'], {}))
      groups.setdefault(column[len('epsilon_'):], []).append(label)
  for i, (key, (rounds, groups)) in enumerate(curves.items()):
    text = '; '.join(f'{", ".join(runs)}: {group}'
                     for group, runs in groups.items())
    if sum(len(runs) for runs in groups.values()) > 1:
      text += ' (identical)'
    ax.plot(rounds, key, label='\n'.join(textwrap.wrap(text, 48)),
            **_style(i))
  return _finish(fig, ax, path)


def _log_x(ax, xs: Sequence[float]) -> None:
  """Log x scale, linear near 0 so that r = 0 or lambda = 0 stays visible."""
  positive = [x for x in xs if x > 0]
  if not positive:
    return
  if min(xs) > 0:
    ax.set_xscale('log')
  else:
    ax.set_xscale('symlog', linthresh=min(positive))


def accuracy_vs_ratio(summaries: Sequence[dict], path: str | None = None,
                      metrics: Sequence[str] = ('acc_g',),
                      title: str | None = None) -> Figure:
  """FedHDP's final `metrics` against r, and the baselines as flat lines.

  A metric has one color and an algorithm one line style, so the legend has
  an entry per metric and per algorithm (not one per pair).
  """
  fig, ax = _new_axes(title, 'r (weight ratio of private groups)',
                      'accuracy (%)')
  fedhdp = sorted((s for s in summaries if s['algorithm'] == 'fedhdp'
                   and s['ratio'] is not None), key=lambda s: s['ratio'])
  ratios = [s['ratio'] for s in fedhdp]
  styles = {'fedhdp': ('FedHDP', '-'), 'nonprivate': ('Non-Private', '--'),
            'dp_fedavg': ('DP-FedAvg', ':')}
  drawn_metrics, drawn_algorithms = [], []
  for i, metric in enumerate(metrics):
    color = f'C{i % 10}'
    points = [(r, s['metrics'].get(metric)) for r, s in zip(ratios, fedhdp)]
    points = [(r, v) for r, v in points if v is not None]
    if points:
      ax.plot(*zip(*points), marker='o', color=color, linestyle='-')
      drawn_metrics.append((metric, color))
      drawn_algorithms.append('fedhdp')
    for s in summaries:
      value = s['metrics'].get(metric)
      if s['algorithm'] in _BASELINES and value is not None:
        ax.axhline(value, linestyle=styles[s['algorithm']][1], color=color)
        if (metric, color) not in drawn_metrics:
          drawn_metrics.append((metric, color))
        drawn_algorithms.append(s['algorithm'])
  handles = [Line2D([], [], color=color, linewidth=6,
                    label=metric_label(metric))
             for metric, color in drawn_metrics]
  handles += [Line2D([], [], color='black', linestyle=styles[a][1],
                     marker='o' if a == 'fedhdp' else None,
                     label=styles[a][0])
              for a in dict.fromkeys(drawn_algorithms)]
  _log_x(ax, ratios)
  return _finish(fig, ax, path, handles)


def metric_vs_lambda(lambdas: Sequence[float],
                     values: Sequence[float] | Mapping[str, Sequence[float]],
                     path: str | None = None, ylabel: str = 'accuracy (%)',
                     title: str | None = None,
                     reference: Mapping[str, float] | None = None) -> Figure:
  """A metric against the regularization weight lambda (e.g. MR-MTL's sweep).

  `values` is one series or {label: series}; lambda = 0 (local training) is
  kept on the axis by a symmetric-log scale. `reference` {label: value} are
  dashed horizontal lines (e.g. local training's and FedAvg's best).
  """
  series = values if isinstance(values, Mapping) else {ylabel: values}
  fig, ax = _new_axes(title, 'lambda', ylabel)
  for label, ys in series.items():
    if len(ys) != len(lambdas):
      raise ValueError(f'{label!r}: {len(ys)} values for {len(lambdas)} '
                       'lambdas.')
    order = np.argsort(lambdas)
    ax.plot(np.asarray(lambdas, float)[order], np.asarray(ys, float)[order],
            marker='o', label=label)
  for i, (label, value) in enumerate((reference or {}).items()):
    ax.axhline(value, linestyle='--', color=f'C{len(series) + i}',
               label=label)
  _log_x(ax, list(lambdas))
  return _finish(fig, ax, path)


def accuracy_by_distribution(table: Mapping[str, Mapping[str, float | None]],
                             path: str | None = None,
                             title: str | None = None) -> Figure:
  """Final Acc_g per privacy distribution, one line per rule (Robust-HDP's
  Figure 2). `table` is {distribution: {rule: Acc_g or None}}; None (a run
  not finished) leaves a gap."""
  fig, ax = _new_axes(title, 'privacy distribution', 'acc_g (%)')
  dists = list(table)
  rules = list(dict.fromkeys(r for row in table.values() for r in row))
  for i, rule in enumerate(rules):
    ys = [table[d].get(rule) for d in dists]
    ax.plot(range(len(dists)), [math.nan if y is None else y for y in ys],
            marker='o', label=rule, **_style(i))
  ax.set_xticks(range(len(dists)), dists)
  return _finish(fig, ax, path)


def accuracy_vs_noise_divisor(summaries: Sequence[dict],
                              path: str | None = None,
                              metrics: Sequence[str] = (
                                  'acc_g', metrics_lib.WORST_GROUP_COLUMN),
                              title: str | None = None) -> Figure:
  """The bias/noise frontier from a sweep of frontier_sampling runs: each
  run's final `metrics` (the mean accuracy and the worst group's) against
  its noise divisor F (noise on the mean S / F, summary.json's
  `noise_divisor`), each point labelled with its t; runs of other rules
  are left out, a metric a run lacks leaves its point out."""
  fig, ax = _new_axes(title, 'noise divisor F (noise on the mean S / F)',
                      'accuracy (%)')
  runs = sorted((s for s in summaries if s.get('tilt') is not None),
                key=lambda s: s['tilt'])
  for i, metric in enumerate(metrics):
    points = [(s['noise_divisor'], s['metrics'][metric], s['tilt'])
              for s in runs if s['metrics'].get(metric) is not None]
    if not points:
      continue
    ax.plot([p[0] for p in points], [p[1] for p in points], marker='o',
            label=metric_label(metric), **_style(i))
    for x, y, t in points:
      ax.annotate(f't={t:g}', (x, y), textcoords='offset points',
                  xytext=(4, 4), fontsize='x-small')
  return _finish(fig, ax, path)


def sweep_plots(run_dirs: Mapping[str, str], out_dir: str,
                prefix: str = '', title: str | None = None) -> list[str]:
  """The three figures of one sweep block; returns the files written."""
  summaries = [read_summary(d) for d in run_dirs.values()]
  # Metrics of private clients are withheld by default: plot what is there.
  metrics = [m for m in ('acc_g', 'acc_g_p', 'acc_g_np', 'acc_l_p', 'acc_l_np')
             if any(s['metrics'].get(m) is not None for s in summaries)]
  paths = [os.path.join(out_dir, f'{prefix}{name}.png') for name in
           ('accuracy_vs_rounds', 'epsilon_vs_rounds', 'accuracy_vs_r')]
  accuracy_vs_rounds(run_dirs, paths[0], title=title)
  epsilon_vs_rounds(run_dirs, paths[1], title=title)
  accuracy_vs_ratio(summaries, paths[2], metrics, title=title)
  return paths

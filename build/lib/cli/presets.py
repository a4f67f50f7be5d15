"""Named presets: the settings of the papers' tables, for reproduce.py.

Each `Preset` is the task and what FeO2 / FedHDP state for one table (SPEC.md
§1): fraction of clients per round, rounds, (eps, delta), 5% opt-out and the
grids of r and of the Ditto lambda. Whatever they leave open (learning rates,
batch size, clipping) keeps run_experiment.py's defaults. A `FigurePreset`
is an untrusted-server figure of Robust-HDP (SPEC.md §3): one run per
privacy distribution and rule, each rule at the learning rate that its short
runs on the first distribution score best. A preset is only flag values
(and, for a figure, its learning-rate grid), so every setting can be
overridden on the command line.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Preset:
  """One published table: its task and the settings the papers state."""

  title: str
  task: str
  fraction_per_round: float
  rounds: int
  epsilon: float
  delta: float
  ratios: tuple[float, ...]
  ditto_lambdas: tuple[float, ...]
  published: str
  num_clients: int | None = None  # None: all of the task's clients
  opt_out_fraction: float = 0.05
  algorithms: tuple[str, ...] = ('nonprivate', 'dp_fedavg', 'fedhdp')
  extra_flags: tuple[tuple[str, object], ...] = ()

  def flag_values(self) -> dict[str, object]:
    """run_experiment.py flag values (lists as strings, as absl holds them)."""
    values = {
        'task': self.task,
        'num_clients': self.num_clients,
        'rounds': self.rounds,
        'epsilons': [f'{self.epsilon:g}'],
        'deltas': [f'{self.delta:g}'],
        'opt_out_fraction': self.opt_out_fraction,
        'algorithms': list(self.algorithms),
        'r': [f'{r:g}' for r in self.ratios],
    }
    values.update(self.extra_flags)
    return values


# The r grids and lambda blocks are those of FeO2 Tables 4-7 (500 rounds,
# 5% opt-out); FedHDP Tables 1-2 report rows of the same runs.
_LAMBDAS = (0.005, 0.05, 0.25)
PRESETS = {
    'mnist_noniid': Preset(
        'non-IID MNIST', 'mnist_noniid', 0.05, 500, 3.6, 1e-4,
        (0, 0.001, 0.01, 0.025, 0.1, 1), _LAMBDAS,
        'FeO2 Table 4, FedHDP Table 1'),
    'mnist_noniid_skewed': Preset(
        'skewed non-IID MNIST', 'mnist_noniid_skewed', 0.05, 500, 3.6, 1e-4,
        (0, 0.025, 0.1, 0.5, 0.75, 0.9, 1), _LAMBDAS,
        'FeO2 Table 5, FedHDP Table 1'),
    'fmnist': Preset(
        'FMNIST (federated EMNIST digits)', 'fmnist', 0.03, 500, 0.6, 1e-4,
        (0, 0.01, 0.025, 0.05, 0.1, 0.5, 1), _LAMBDAS,
        'FeO2 Table 6, FedHDP Table 2'),
    'femnist': Preset(
        'FEMNIST (federated EMNIST, 62 classes)', 'femnist', 0.03, 500, 4.1,
        1e-4, (0, 0.001, 0.01, 0.025, 0.1, 0.5, 1), _LAMBDAS,
        'FeO2 Table 7, FedHDP Table 2'),
    'digits': Preset(
        'bundled digits (pipeline check, not a paper table)', 'digits', 0.25,
        20, 3.6, 1e-4, (0.1, 1), (0.05,), 'none', num_clients=20,
        extra_flags=(('clip_count_stddev', 2.0), ('eval_every', 5))),
}
PAPER_PRESETS = ('mnist_noniid', 'mnist_noniid_skewed', 'fmnist', 'femnist')


@dataclasses.dataclass(frozen=True)
class FigurePreset:
  """An untrusted-server figure: every rule on every distribution.

  The paper leaves the learning rate open (its baselines "have to use
  smaller learning rates"), so each rule gets the rate of `learning_rates`
  that scores the best Acc_g after the first `selection_rounds` rounds of
  the whole run on the first distribution (noise calibrated for all the
  rounds, as in the figure's runs); --client_lr on the command line fixes
  one instead.
  """

  title: str
  task: str
  num_clients: int
  distributions: tuple[str, ...]
  algorithms: tuple[str, ...]
  rounds: int
  clip: float
  delta: float
  learning_rates: tuple[float, ...]
  selection_rounds: int
  published: str
  # (rule, rate) pairs a finished selection chose, so later sittings and
  # fresh clones train at the same rates instead of selecting again (whose
  # secret DP noise would differ); None: select.
  chosen_learning_rates: tuple[tuple[str, float], ...] | None = None

  def flag_values(self) -> dict[str, object]:
    """run_experiment.py flag values (lists as strings, as absl holds them)."""
    return {
        'task': self.task,
        'num_clients': self.num_clients,
        'rounds': self.rounds,
        'deltas': [f'{self.delta:g}'],
        'dp_sgd_clip': self.clip,
        'algorithms': list(self.algorithms),
        'epsilon_distribution': self.distributions[0],
    }


# Robust-HDP's Figure 2 on Fashion-MNIST: 20 clients, full participation,
# E = 200 rounds, the authors' c = 3 and delta = 1e-4, Dist1-Dist9. Dist1,
# Dist6 and Dist9 (the ones the paper's text discusses) run first, so an
# unfinished figure already checks its claims.
FIGURES = {
    'robust_hdp_fig2': FigurePreset(
        'Robust-HDP Figure 2 (Fashion-MNIST, IID)', 'fashion_mnist_iid', 20,
        tuple(f'dist{i}' for i in (1, 6, 9, 2, 3, 4, 5, 7, 8)),
        ('robust_hdp', 'weiavg', 'pfa', 'dpfedavg', 'min_epsilon'), 200, 3.0,
        1e-4, (0.01, 0.03, 0.1, 0.3), 20,
        'Robust-HDP Figure 2 (its appendix Tables 8-9)',
        # The selection of 2026-11-26 (RESULTS.md §9 has its scores).
        chosen_learning_rates=(('robust_hdp', 0.03), ('weiavg', 0.03),
                               ('pfa', 0.1), ('dpfedavg', 0.03),
                               ('min_epsilon', 0.01))),
}

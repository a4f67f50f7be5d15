"""Runs FedHDP / FeO2 experiments from the command line.

Examples:
  python run_experiment.py --task=digits --algorithms=nonprivate,dp_fedavg,fedhdp \
      --r=0.1,1 --rounds=60 --output_dir=results/demo
  python run_experiment.py --task=point_estimation --r=0.2,1

Each configuration writes `<output_dir>/<config>/rounds.csv` (one row per
round: clip norm, per-group counts, noise and epsilon spent, metrics) and
`summary.json`; the comparison table is printed and saved as `results.md` and
`results.csv` in `--output_dir`.
"""

from __future__ import annotations

import csv
import os
import sys

from absl import app
from absl import flags

import tff_hdp  # noqa: F401  (quiets TF and imports it before app.run)

import tasks

_TASK = flags.DEFINE_enum('task', 'digits',
                          sorted(tasks.REGISTRY) + ['point_estimation'],
                          'Task to run.')
_DATA_DIR = flags.DEFINE_string(
    'data_dir', None, 'Directory with the task\'s data files (real datasets).')
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', None, 'Number of clients, for tasks that allow choosing it.')
_TRUSTED = ('fedhdp', 'dp_fedavg', 'nonprivate')
_UNTRUSTED = ('robust_hdp', 'oracle', 'weiavg', 'dpfedavg', 'pfa',
              'min_epsilon')
_CROSS_SILO = ('local', 'fedavg', 'finetune', 'mrmtl', 'ditto', 'ifca',
               'ifca_mrmtl')
_ALGORITHMS = flags.DEFINE_list(
    'algorithms', ['fedhdp'],
    'Comma-separated algorithms. Trusted server (client-level DP): fedhdp, '
    'dp_fedavg, nonprivate. Untrusted server (each client runs DP-SGD at its '
    'own eps; full participation): robust_hdp, oracle, weiavg, dpfedavg, pfa, '
    'min_epsilon. Cross-silo, silo-specific sample-level DP (DP-SGD in every '
    'silo at its own eps; every silo every round): local, fedavg, finetune, '
    'mrmtl, ditto, ifca, ifca_mrmtl.')
_LAMBDAS = flags.DEFINE_list(
    'lambdas', ['0.1'], 'Cross-silo: regularization lambda of mrmtl, ditto '
    'and ifca_mrmtl; several values are a sweep.')
_CLIENT_LRS = flags.DEFINE_list(
    'client_lrs', None, 'Cross-silo: DP-SGD learning rates to sweep '
    '(default: --client_lr).')
_SWEEP = flags.DEFINE_bool(
    'sweep', False, 'Cross-silo: sweep the MR-MTL paper\'s grids (lambda in '
    '1e-4..10, learning rate in 1e-3..0.3) unless --lambdas / --client_lrs '
    'are given; reports the best setting and the curve over lambda.')
_NUM_CLUSTERS = flags.DEFINE_integer(
    'num_clusters', 4, 'Cross-silo ifca, ifca_mrmtl: number of clusters.')
_SELECTION_FRACTION = flags.DEFINE_float(
    'selection_fraction', 0.1, 'Cross-silo ifca, ifca_mrmtl: fraction of the '
    'rounds (the first ones) in which silos choose their cluster privately.')
_SELECTION_SHARE = flags.DEFINE_float(
    'selection_share', 0.03, 'Cross-silo ifca, ifca_mrmtl: epsilon of each '
    'private cluster selection, as a fraction of the silo\'s epsilon.')
_EPSILON_DISTRIBUTION = flags.DEFINE_enum(
    'epsilon_distribution', 'mixgauss1',
    ['mixgauss1', 'mixgauss2', 'mixgauss3', 'uniform'],
    'Untrusted server: distribution of the clients\' epsilons.')
_DP_SGD_CLIP = flags.DEFINE_float(
    'dp_sgd_clip', 1.0, 'Untrusted server and cross-silo: DP-SGD\'s '
    'per-example clip norm c.')
_R = flags.DEFINE_list(
    'r', ['1.0'], 'FedHDP ratio(s) r of the private groups\' weight (the '
    'opt-out group has r=1); each value is one configuration.')
_EPSILONS = flags.DEFINE_list(
    'epsilons', ['3.6'], 'Target epsilon of each private level (cross-silo: '
    'one value for every silo, or one per silo).')
_DELTAS = flags.DEFINE_list(
    'deltas', ['1e-4'], 'Target delta of each private level (one value, or '
    'one per level).')
_LEVEL_FRACTIONS = flags.DEFINE_list(
    'level_fractions', None, 'Fraction of the private clients at each '
    'private level (default: equal).')
_OPT_OUT = flags.DEFINE_float('opt_out_fraction', 0.05,
                              'Fraction of clients that opt out of DP.')
_ROUNDS = flags.DEFINE_integer('rounds', 60, 'Training rounds.')
_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', 10, 'Expected (poisson) or exact (fixed) number of '
    'clients per round.')
_SAMPLING = flags.DEFINE_enum(
    'sampling', 'poisson', ['poisson', 'fixed'],
    'Client sampling; the accountant uses the matching event.')
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', 1, 'Local epochs E.')
_COHORT_SIZE = flags.DEFINE_integer(
    'cohort_size', 0, 'fedhdp, dp_fedavg, nonprivate: simulate up to this '
    'many sampled clients inside one TFF client (0 or 1: one TFF client per '
    'client). Same training, clipping, noise and accounting per client; '
    'rounds of 100 clients run ~15x faster (benchmarks/round_speed.py). 64 '
    'suits small models; a cohort holds that many model-sized updates, so '
    'use less for large ones.')
_CLIENT_LR = flags.DEFINE_float('client_lr', 0.1, 'Client SGD learning rate.')
_SERVER_LR = flags.DEFINE_float('server_lr', 1.0, 'Server SGD learning rate.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
_CLIP_NORM = flags.DEFINE_float('clip_norm', 0.5, 'Initial clip norm S.')
_TARGET_QUANTILE = flags.DEFINE_float(
    'target_quantile', 0.5, 'Target fraction kappa of unclipped updates.')
_CLIP_LR = flags.DEFINE_float(
    'clip_lr', 0.2, 'Adaptive clipping learning rate eta_b (0: fixed norm).')
_CLIP_COUNT_STDDEV = flags.DEFINE_float(
    'clip_count_stddev', None, 'Noise std z_b of the unclipped count '
    '(default: 5% of the expected clients per round).')
_DENOMINATOR = flags.DEFINE_enum(
    'denominator', 'expected', ['expected', 'realized'],
    'Private groups\' mean denominator: expected size (privacy-sound) or the '
    'realized count.')
_DITTO_LAMBDA_P = flags.DEFINE_float(
    'ditto_lambda_p', None, 'Ditto lambda of private clients; setting this '
    'or --ditto_lambda_np turns personalization on (the other defaults to '
    'the same value).')
_DITTO_LAMBDA_NP = flags.DEFINE_float(
    'ditto_lambda_np', None, 'Ditto lambda of opt-out clients.')
_DITTO_LR = flags.DEFINE_float(
    'ditto_lr', None, 'Personal model learning rate eta_p (default: '
    '--client_lr).')
_SEED = flags.DEFINE_integer(
    'seed', 0, 'Seed of the public random choices: data order, initial '
    'weights, which clients opt out, the clients\' epsilons. The DP noise and '
    'the sampling are drawn from a secret seed (OS entropy, kept in the '
    'checkpoint), so that the printed epsilon holds.')
_RELEASE_UNPROTECTED = flags.DEFINE_bool(
    'release_unprotected_stats', False, 'fedhdp, dp_fedavg, nonprivate: also '
    'write statistics of private clients that the printed epsilon does NOT '
    'cover (realized counts, training loss and accuracy, Acc_g,p, Acc_l,p and '
    'Delta columns) to rounds.csv, TensorBoard and summary.json. Not private; '
    'announced in the output.')
_UNSAFE_SEEDED = flags.DEFINE_bool(
    'unsafe_seeded_dp_randomness', False, 'Draw the DP noise and the sampling '
    'from --seed so that runs repeat exactly. Anyone who knows the seed can '
    'remove the noise: this VOIDS the privacy guarantee. For experiments '
    'only; announced in the output.')
_UNSAFE_LARGE_DELTA = flags.DEFINE_bool(
    'unsafe_allow_large_delta', False, 'Accept a --deltas value at or above '
    '1/N (N: the group\'s clients, or a DP-SGD client\'s examples), which '
    'allows releasing someone\'s data outright. For experiments only.')
_EVAL_EVERY = flags.DEFINE_integer('eval_every', 10, 'Evaluate every k rounds.')
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    'checkpoint_every', 10, 'Save the run state every k rounds (0: never); '
    're-running the same command resumes from the last checkpoint.')
_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'results/latest',
                                  'Where files are written.')
_TRIALS = flags.DEFINE_integer(
    'trials', 20000, 'point_estimation: Monte Carlo trials.')
_PE_CLIENTS = flags.DEFINE_integer('pe_clients', 20,
                                   'point_estimation: clients N.')
_PE_PRIVATE = flags.DEFINE_integer('pe_private', 19,
                                   'point_estimation: private clients N_p.')
_PE_SAMPLES = flags.DEFINE_integer('pe_samples', 10,
                                   'point_estimation: samples per client.')
_PE_TAU2 = flags.DEFINE_float('pe_tau2', 0.1, 'point_estimation: tau^2.')
_PE_BETA2 = flags.DEFINE_float('pe_beta2', 1.0, 'point_estimation: beta^2.')
_PE_GAMMA2 = flags.DEFINE_float('pe_gamma2', 0.05,
                                'point_estimation: gamma^2.')


class InputError(ValueError):
  """Bad flags or data: reported as one line, without a traceback."""


def _floats(flag) -> list[float]:
  try:
    return [float(v) for v in flag.value]
  except ValueError:
    raise InputError(
        f'--{flag.name} must be comma-separated numbers, got '
        f'{",".join(flag.value)!r}.') from None


def _check(condition: bool, message: str) -> None:
  if not condition:
    raise InputError(message)


def validate_flags() -> None:
  _check(_ROUNDS.value >= 1, f'--rounds must be >= 1, got {_ROUNDS.value}.')
  _check(_CLIENTS_PER_ROUND.value >= 1,
         f'--clients_per_round must be >= 1, got {_CLIENTS_PER_ROUND.value}.')
  _check(0.0 <= _OPT_OUT.value <= 1.0,
         f'--opt_out_fraction must be in [0, 1], got {_OPT_OUT.value}.')
  for r in _floats(_R):
    _check(r >= 0, f'--r must be >= 0, got {r}.')
  for e in _floats(_EPSILONS):
    _check(e > 0, f'--epsilons must be > 0, got {e}.')
  for d in _floats(_DELTAS):
    _check(0 < d < 1, f'--deltas must be in (0, 1), got {d}.')
  _check(_EVAL_EVERY.value >= 1,
         f'--eval_every must be >= 1, got {_EVAL_EVERY.value}.')
  for flag in (_DITTO_LAMBDA_P, _DITTO_LAMBDA_NP):
    _check(flag.value is None or flag.value >= 0,
           f'--{flag.name} must be >= 0, got {flag.value}.')
  _check(_DITTO_LR.value is None or _DITTO_LR.value > 0,
         f'--ditto_lr must be > 0, got {_DITTO_LR.value}.')
  _check(_CHECKPOINT_EVERY.value >= 0,
         f'--checkpoint_every must be >= 0, got {_CHECKPOINT_EVERY.value}.')
  _check(_COHORT_SIZE.value >= 0,
         f'--cohort_size must be >= 0, got {_COHORT_SIZE.value}.')
  known = _TRUSTED + _UNTRUSTED + _CROSS_SILO
  for a in _ALGORITHMS.value:
    _check(a in known, f'--algorithms: unknown algorithm {a!r}; choose from '
           f'{", ".join(known)}.')
  kinds = {_setting(a) for a in _ALGORITHMS.value}
  _check(len(kinds) == 1, '--algorithms: trusted-server (fedhdp, dp_fedavg, '
         'nonprivate), untrusted-server and cross-silo algorithms cannot be '
         'mixed in one run.')
  for lam in _floats(_LAMBDAS):
    _check(lam >= 0, f'--lambdas must be >= 0, got {lam}.')
  for lr in _floats(_CLIENT_LRS) if _CLIENT_LRS.value else []:
    _check(lr > 0, f'--client_lrs must be > 0, got {lr}.')
  _check(_DP_SGD_CLIP.value > 0,
         f'--dp_sgd_clip must be > 0, got {_DP_SGD_CLIP.value}.')


def _setting(algorithm: str) -> str:
  if algorithm in _UNTRUSTED:
    return 'untrusted'
  return 'cross_silo' if algorithm in _CROSS_SILO else 'trusted'


def _private_levels():
  from tff_hdp.privacy.privacy_groups import PrivacyGroup  # pylint: disable=g-import-not-at-top
  eps = _floats(_EPSILONS)
  deltas = _floats(_DELTAS)
  if len(deltas) == 1:
    deltas = deltas * len(eps)
  _check(len(deltas) == len(eps),
         f'--deltas has {len(deltas)} values for {len(eps)} --epsilons.')
  return [PrivacyGroup(f'private_eps{e:g}', e, d) for e, d in zip(eps, deltas)]


def _run_point_estimation() -> None:
  from tff_hdp.estimation import point_estimation  # pylint: disable=g-import-not-at-top
  from tff_hdp.estimation import point_estimation_theory as theory  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  try:
    setting = theory.PointEstimationSetting(
        _PE_CLIENTS.value, _PE_PRIVATE.value, _PE_SAMPLES.value,
        _PE_TAU2.value, _PE_BETA2.value, _PE_GAMMA2.value)
  except ValueError as e:
    raise InputError(f'point_estimation flags: {e}') from None
  r_star = theory.optimal_ratio(setting)
  ratios = [r_star] + [r for r in _floats(_R) if r != r_star]
  results = point_estimation.monte_carlo(setting, ratios, _TRIALS.value,
                                         _SEED.value)
  header = ['r', 'empirical server MSE', 'theory sigma_s^2', 'rel. error']
  rows = [[f'{res.ratio:.4g}' + (' (r*)' if res.ratio == r_star else ''),
           f'{res.empirical_mse:.6g}', f'{res.theoretical_variance:.6g}',
           f'{100 * res.relative_error:.2f}%'] for res in results]
  table = tables.markdown_table(header, rows)
  print(f'\nFederated point estimation, {_TRIALS.value} trials '
        f'(N={setting.num_clients}, N_p={setting.num_private}):\n')
  print(table)
  print(f"\nsigma_s,opt^2 = {theory.server_variance_optimal(setting):.6g}, "
        f"sigma_s,fedavg^2 = {theory.server_variance_fedavg(setting):.6g}, "
        f"lambda_p* = {theory.optimal_lambda_private(setting):.4g}, "
        f"lambda_np* = {theory.optimal_lambda_non_private(setting):.4g}")
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  tables.write_table(_OUTPUT_DIR.value, header, rows)


def load_task():
  try:
    return tasks.load(
        _TASK.value,
        tasks.TaskOptions(data_dir=_DATA_DIR.value,
                          batch_size=_BATCH_SIZE.value, seed=_SEED.value,
                          num_clients=_NUM_CLIENTS.value))
  except ValueError as e:
    raise InputError(f'--task={_TASK.value}: {e}') from None


def _print_privacy_warnings() -> None:
  """The untrusted and cross-silo runs' header lines (`release_policy`)."""
  from tff_hdp.privacy import release_policy  # pylint: disable=g-import-not-at-top
  for line in release_policy.privacy_warnings(
      seeded=_UNSAFE_SEEDED.value, large_delta=_UNSAFE_LARGE_DELTA.value):
    print(line)


def _run_untrusted() -> None:
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import untrusted_setting  # pylint: disable=g-import-not-at-top
  task = load_task()
  settings = untrusted_setting.UntrustedSettings(
      rounds=_ROUNDS.value,
      epsilon_distribution=_EPSILON_DISTRIBUTION.value,
      delta=_floats(_DELTAS)[0],
      learning_rate=_CLIENT_LR.value,
      clip_norm=_DP_SGD_CLIP.value,
      seed=_SEED.value,
      eval_every=_EVAL_EVERY.value,
      unsafe_seeded_dp_randomness=_UNSAFE_SEEDED.value,
      allow_large_delta=_UNSAFE_LARGE_DELTA.value)
  _print_privacy_warnings()
  rows = []
  try:
    for rule in _ALGORITHMS.value:
      s = untrusted_setting.run_rule(task, rule, settings,
                                        _OUTPUT_DIR.value)
      rows.append([rule, f"{s['metrics']['acc_g']:.2f}",
                   f"{s['epsilon_spent_min']:.3g} - "
                   f"{s['epsilon_spent_max']:.3g}", f"{s['seconds']:.0f}"])
  except ValueError as e:
    raise InputError(str(e)) from None
  header = ['Aggregation', 'Acc_g', 'eps spent per client (min - max)',
            'seconds']
  print(f'\n{task.name}: {len(task.client_ids)} clients, all in every round, '
        f'{_ROUNDS.value} rounds, eps ~ {_EPSILON_DISTRIBUTION.value}\n')
  print(tables.markdown_table(header, rows))
  tables.write_table(_OUTPUT_DIR.value, header, rows)


def _run_cross_silo() -> None:
  from tff_hdp.simulation import cross_silo_setting as cse  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import plots  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  task = load_task()
  lambdas = _floats(_LAMBDAS)
  rates = _floats(_CLIENT_LRS) if _CLIENT_LRS.value else [_CLIENT_LR.value]
  if _SWEEP.value:
    if _LAMBDAS.present == 0:
      lambdas = list(cse.LAMBDA_GRID)
    if not _CLIENT_LRS.value:
      rates = list(cse.LEARNING_RATE_GRID)
  settings = cse.CrossSiloSettings(
      rounds=_ROUNDS.value, epsilons=tuple(_floats(_EPSILONS)),
      delta=_floats(_DELTAS)[0], learning_rate=rates[0],
      clip_norm=_DP_SGD_CLIP.value, regularization=lambdas[0],
      num_clusters=_NUM_CLUSTERS.value,
      selection_fraction=_SELECTION_FRACTION.value,
      selection_share=_SELECTION_SHARE.value, seed=_SEED.value,
      eval_every=_EVAL_EVERY.value, checkpoint_every=_CHECKPOINT_EVERY.value,
      unsafe_seeded_dp_randomness=_UNSAFE_SEEDED.value,
      allow_large_delta=_UNSAFE_LARGE_DELTA.value)
  _print_privacy_warnings()
  rows, curves = [], {}
  try:
    for method in _ALGORITHMS.value:
      result = cse.sweep(task, method, settings, lambdas, rates,
                         _OUTPUT_DIR.value)
      if result['best_lambda'] is not None and len(result['curve']) > 1:
        curves[method] = result['curve']
      low, high = result['epsilon_spent']
      rows.append([
          method,
          '-' if result['best_lambda'] is None else
          f"{result['best_lambda']:g}",
          f"{result['best_learning_rate']:g}",
          f"{result['best_metric']:.4g}",
          f'{low:.3g} - {high:.3g}',
          str(len(result['runs'])),
      ])
  except trusted_setting.RUN_ERRORS as e:
    raise InputError(str(e)) from None
  metric = 'MSE' if task.metric == 'mse' else 'accuracy (%)'
  header = ['Method', 'lambda', 'learning rate', f'{metric}, test-weighted',
            'eps spent per silo (min - max)', 'runs']
  print(f'\n{task.name}: {len(task.client_ids)} silos, every silo every '
        f'round, {_ROUNDS.value} rounds, silo eps {",".join(_EPSILONS.value)}'
        f', best over the swept settings\n')
  print(tables.markdown_table(header, rows))
  tables.write_table(_OUTPUT_DIR.value, header, rows)
  for method, curve in curves.items():
    print(f'\n{method}: best {metric} over learning rates, per lambda\n')
    print(tables.markdown_table(
        ['lambda', 'learning rate', metric],
        [[f'{lam:g}', f'{lr:g}', f'{m:.4g}'] for lam, lr, m in curve]))
    plots.metric_vs_lambda(
        [lam for lam, _, _ in curve], [m for _, _, m in curve],
        os.path.join(_OUTPUT_DIR.value, f'{method}_vs_lambda.png'),
        ylabel=metric, title=f'{task.name}: {method}')
  print(f'\nPer-round metrics, summaries and sweeps: {_OUTPUT_DIR.value}/')


def learning_setup(task):
  """(settings, client choices, configurations) the flags ask for on `task`.

  reproduce.py sets the flags from a preset and calls this too, so both entry
  points train a configuration alike.
  """
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.learning.fedhdp import ClipSettings  # pylint: disable=g-import-not-at-top
  n = len(task.client_ids)
  _check(_CLIENTS_PER_ROUND.value <= n,
         f'--clients_per_round={_CLIENTS_PER_ROUND.value} exceeds the '
         f'{n} clients of task {task.name!r}.')
  if _SAMPLING.value == 'poisson':
    sampling = accounting.PoissonSampling(_CLIENTS_PER_ROUND.value / n)
  else:
    sampling = accounting.FixedSizeSampling(n, _CLIENTS_PER_ROUND.value)
  levels = _private_levels()
  ditto = None
  if _DITTO_LAMBDA_P.value is not None or _DITTO_LAMBDA_NP.value is not None:
    lam_p = (_DITTO_LAMBDA_P.value if _DITTO_LAMBDA_P.value is not None else
             _DITTO_LAMBDA_NP.value)
    lam_np = (_DITTO_LAMBDA_NP.value if _DITTO_LAMBDA_NP.value is not None
              else lam_p)
    ditto = trusted_setting.DittoSettings(lam_p, lam_np,
                                     _DITTO_LR.value or _CLIENT_LR.value)
  fractions = (_floats(_LEVEL_FRACTIONS) if _LEVEL_FRACTIONS.value else None)
  settings = trusted_setting.Settings(
      rounds=_ROUNDS.value,
      sampling=sampling,
      local_epochs=_LOCAL_EPOCHS.value,
      client_lr=_CLIENT_LR.value,
      server_lr=_SERVER_LR.value,
      clip=ClipSettings(
          initial_norm=_CLIP_NORM.value,
          target_quantile=_TARGET_QUANTILE.value,
          learning_rate=_CLIP_LR.value,
          count_stddev=_CLIP_COUNT_STDDEV.value),
      denominator=_DENOMINATOR.value,
      seed=_SEED.value,
      eval_every=_EVAL_EVERY.value,
      checkpoint_every=_CHECKPOINT_EVERY.value,
      ditto=ditto,
      cohort_size=_COHORT_SIZE.value,
      release_unprotected_stats=_RELEASE_UNPROTECTED.value,
      unsafe_seeded_dp_randomness=_UNSAFE_SEEDED.value,
      allow_large_delta=_UNSAFE_LARGE_DELTA.value)
  try:
    choices = trusted_setting.client_choices(task, levels, _OPT_OUT.value,
                                        _SEED.value, fractions)
    configs = trusted_setting.configurations(_ALGORITHMS.value, _floats(_R),
                                        choices)
  except ValueError as e:
    raise InputError(str(e)) from None
  return settings, choices, configs


def _run_learning() -> None:
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  task = load_task()
  n = len(task.client_ids)
  settings, choices, configs = learning_setup(task)
  warnings = trusted_setting.privacy_warnings(settings)
  for line in warnings:
    print(line)
  try:
    summaries = []
    for config in configs:
      summary, _ = trusted_setting.run_configuration(task, config, choices,
                                                settings, _OUTPUT_DIR.value)
      summaries.append(summary)
  except trusted_setting.RUN_ERRORS as e:
    raise InputError(str(e)) from None
  header, rows = tables.results_table(summaries)
  print(f'\n{task.name}: {n} clients, {_ROUNDS.value} rounds, '
        f'{_CLIENTS_PER_ROUND.value} clients per round ({_SAMPLING.value}), '
        f'{_OPT_OUT.value:.0%} opt out' + (
            f', {task.dropped_clients} clients without examples dropped'
            if task.dropped_clients else '') + '\n')
  caption = '\n'.join(warnings + tables.table_notes(
      settings.release_unprotected_stats))
  print(caption + '\n')
  print(tables.markdown_table(header, rows))
  tables.write_table(_OUTPUT_DIR.value, header, rows, caption=caption)
  print(f'\nPer-round metrics and summaries: {_OUTPUT_DIR.value}/')


def main(argv: list[str]) -> None:
  try:
    if len(argv) > 1:
      raise InputError(f'unexpected arguments: {argv[1:]}')
    validate_flags()
    from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
    runtime.init()
    if _TASK.value == 'point_estimation':
      _run_point_estimation()
    elif _setting(_ALGORITHMS.value[0]) == 'untrusted':
      _run_untrusted()
    elif _setting(_ALGORITHMS.value[0]) == 'cross_silo':
      _run_cross_silo()
    else:
      _run_learning()
  except InputError as e:
    sys.exit(f'run_experiment.py: error: {e}')


if __name__ == '__main__':
  if sys.version_info[:2] != (3, 11):
    sys.exit(f'tff-hdp needs Python 3.11 (TensorFlow 2.14 / TFF 0.87); this '
             f'is Python {sys.version.split()[0]}.')
  app.run(main)

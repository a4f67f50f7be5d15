"""Every flag of run_experiment.py, the settings that read each one
(`APPLIES`, which also groups --help), and their validation: a bad value is
an `InputError` naming the flag, which `cli.entry` prints as one line with
exit status 2.

Task and algorithm names come from the registries (`tasks.REGISTRY`,
`tff_hdp.learning.algorithms`), so a registered one is selectable here
without an edit. Nothing here imports TensorFlow: --help and the checks run
before it is loaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading

from absl import flags as absl_flags

from tff_hdp import tasks
from tff_hdp.cli.entry import InputError  # noqa: F401  (raised by every check here)
from tff_hdp.learning import algorithms
from tff_hdp.privacy import heterogeneity
from tff_hdp.simulation import workers

# Common to every setting: the task, its data and the run.
TASK = absl_flags.DEFINE_enum('task', 'digits',
                          sorted(tasks.REGISTRY) + ['point_estimation'],
                          'Task to run.')
DATA_DIR = absl_flags.DEFINE_string(
    'data_dir', None, 'Directory with the task\'s data files (real '
    'datasets). Default: the task\'s folder under $TFF_HDP_DATA, else '
    '../shared/data beside the repository.')
NUM_CLIENTS = absl_flags.DEFINE_integer(
    'num_clients', None, 'Number of clients, for tasks that allow choosing '
    'it (EMNIST and LEAF tasks: a seeded subset of the writers). Default: '
    'the task\'s own, ' + ', '.join(
        f'{name} {task.num_clients:,}' for name, task in tasks.REGISTRY.items()
        if task.num_clients) + '; every client of the data for the others '
    '(refused by ' + ', '.join(name for name, task in tasks.REGISTRY.items()
                               if not task.chooses_clients) +
    ', whose silos are fixed).')
CLIENT_DATA = absl_flags.DEFINE_string(
    'client_data', None, 'A TFF SqlClientData file (or FilePerUserClientData '
    'folder) of your own clients, '
    'trained on instead of --task (its layout and model: README, "Bringing '
    'your own ClientData").')
WORKER_DATA = absl_flags.DEFINE_string(
    'worker_data', None, 'An SqlClientData file from which the TFF workers '
    'read each round\'s clients themselves, so a round sends client ids and '
    'orders, not examples (written from the task when absent, refused when '
    'it holds other data). Every worker must see it '
    'at this same path: a copy or a shared mount (README, "Data on the '
    'workers"). Results equal the run without it.')
ALGORITHMS = absl_flags.DEFINE_list(
    'algorithms', ['fedhdp'],
    'Comma-separated algorithms. Trusted server (client-level DP): '
    f'{", ".join(algorithms.names(algorithms.TRUSTED))}. Untrusted server '
    '(each client runs DP-SGD at its own eps; full participation): '
    f'{", ".join(algorithms.names(algorithms.UNTRUSTED))}. Cross-silo, '
    'silo-specific sample-level DP (DP-SGD in every silo at its own eps; '
    'every silo every round): '
    f'{", ".join(algorithms.names(algorithms.CROSS_SILO))}.')
LAMBDAS = absl_flags.DEFINE_list(
    'lambdas', ['0.1'], 'Cross-silo: regularization lambda of mrmtl, ditto '
    'and ifca_mrmtl; several values are a sweep.')
LAMBDAS_BY_EPSILON = absl_flags.DEFINE_string(
    'lambdas_by_epsilon', None, 'Cross-silo mrmtl, ditto, ifca_mrmtl: each '
    'silo the lambda of its epsilon, e.g. 1:0.5,3:0.2,10:0.1 (one pair per '
    'epsilon of --epsilons), instead of one --lambdas for every silo.')
SILO_NOISE_AWARE = absl_flags.DEFINE_bool(
    'silo_noise_aware_lambdas', False, 'Cross-silo mrmtl, ditto, ifca_mrmtl: '
    'each silo\'s lambda from MR-MTL\'s mean-estimation optimum (SPEC.md '
    'section 2, eq. (7) with each silo its own DP noise; '
    'tff_hdp/privacy/silo_lambdas.py) read from public quantities only: the '
    'silo\'s noise multiplier, sampling rate, steps and size, the model\'s '
    'size and --heterogeneity (the silos\' assumed spread, default 1); '
    'printed before training, costs no privacy. Instead of --lambdas and '
    '--lambdas_by_epsilon.')
REGULARIZER_PLACEMENT = absl_flags.DEFINE_enum(
    'regularizer_placement', 'per_example', ['per_example', 'after_noise'],
    'Cross-silo mrmtl, ditto, ifca_mrmtl: where the pull lambda (w - w_bar) '
    'joins DP-SGD\'s gradient. per_example: inside every example\'s loss, '
    'clipped and noised with it (the MR-MTL authors\' code); after_noise: '
    'added to the noisy gradient (data-independent, so free of privacy cost; '
    'SPEC.md section 2).')
CLIENT_LRS = absl_flags.DEFINE_list(
    'client_lrs', None, 'Cross-silo: DP-SGD learning rates to sweep '
    '(default: --client_lr).')
SWEEP = absl_flags.DEFINE_bool(
    'sweep', False, 'Cross-silo: sweep the MR-MTL paper\'s grids (lambda in '
    '1e-4..10, learning rate in 1e-3..0.3) unless --lambdas / --client_lrs '
    'are given; reports the best setting and the curve over lambda.')
NUM_CLUSTERS = absl_flags.DEFINE_integer(
    'num_clusters', 4, 'Cross-silo ifca, ifca_mrmtl: number of clusters.')
SELECTION_FRACTION = absl_flags.DEFINE_float(
    'selection_fraction', 0.1, 'Cross-silo ifca, ifca_mrmtl: fraction of the '
    'rounds (the first ones) in which silos choose their cluster privately.')
SELECTION_SHARE = absl_flags.DEFINE_float(
    'selection_share', 0.03, 'Cross-silo ifca, ifca_mrmtl: epsilon of each '
    'private cluster selection, as a fraction of the silo\'s epsilon.')
EPSILON_DISTRIBUTION = absl_flags.DEFINE_enum(
    'epsilon_distribution', 'mixgauss1', list(heterogeneity.DISTRIBUTIONS),
    'Untrusted server: the clients\' epsilons and batch sizes. mixgauss1-3 '
    '(PFA\'s mixtures) and uniform (eps in [1, 10]) draw them by --seed, '
    'batch sizes from {16, 32, 64, 128}; dist1-dist9 are Robust-HDP\'s fixed '
    'lists of both, for 20, 40 or 60 clients.')
DP_SGD_CLIP = absl_flags.DEFINE_float(
    'dp_sgd_clip', 1.0, 'Untrusted server and cross-silo: DP-SGD\'s '
    'per-example clip norm c.')
# FedHDP's r (its registry record's option) is point estimation's too.
R = absl_flags.DEFINE_list('r', None, algorithms.RATIO.help + (
    ' Point estimation: the ratios r it estimates at besides r* (default 1).'))
EPSILONS = absl_flags.DEFINE_list(
    'epsilons', ['3.6'], 'Target epsilon of each private level (cross-silo: '
    'one value for every silo, or one per silo).')
DELTAS = absl_flags.DEFINE_list(
    'deltas', ['1e-4'], 'Target delta of each private level (one value, or '
    'one per level).')
PRIVACY_LEVELS_FILE = absl_flags.DEFINE_string(
    'privacy_levels_file', None, 'Each client\'s own level instead of '
    'random ones (--opt_out_fraction, --level_fractions): a CSV of '
    'client_id,level rows or a JSON object {client id: level}, a level being '
    'one of --epsilons (or its group name) or opt_out; every client of the '
    'task listed once, and every level chosen. Who chose which level is '
    'public, as FedHDP assumes.')
LEVELS_BY_LABEL = absl_flags.DEFINE_string(
    'levels_by_label', None, 'Each client\'s level from its data: the level '
    'of the band holding its most frequent training label, e.g. '
    '0-3:1,4-6:3.6,7-9:10 (levels as in --privacy_levels_file; opt_out '
    'allowed). Classification tasks; the bands, and so each client\'s band, '
    'are public.')
LEVEL_FRACTIONS = absl_flags.DEFINE_list(
    'level_fractions', None, 'Fraction of the private clients at each '
    'private level (default: equal).')
OPT_OUT = absl_flags.DEFINE_float('opt_out_fraction', 0.05,
                              'Fraction of clients that opt out of DP.')
ROUNDS = absl_flags.DEFINE_integer('rounds', 60, 'Training rounds.')
CLIENTS_PER_ROUND = absl_flags.DEFINE_integer(
    'clients_per_round', 10, 'Expected (poisson) or exact (fixed) number of '
    'clients per round.')
SAMPLING = absl_flags.DEFINE_enum(
    'sampling', 'poisson', ['poisson', 'fixed', 'device'],
    'Client sampling; the accountant uses the matching event. device: '
    'nothing is sampled; each device keeps its own participation rule '
    '(--min_separation, --max_participations), the server takes '
    '--clients_per_round of the devices the rule lets check in, and the '
    'accountant assumes nothing else (no amplification).')
ACCOUNTANT = absl_flags.DEFINE_enum(
    'accountant', 'pld', ['pld', 'rdp'],
    'How Poisson sampling\'s amplification is accounted (trusted '
    '--sampling=poisson, and the untrusted and cross-silo settings\' DP-SGD): '
    'pld, dp_accounting\'s privacy-loss distribution (pessimistic, at '
    '--pld_discretization; the same targets with 5-9%% less noise than rdp), '
    'or rdp (Renyi DP, as published numbers). Trusted fixed and device have '
    'one analysis each: RDP and the exact Gaussian curve; IFCA\'s silos stay '
    'with RDP, which composes its selections.')
PLD_DISCRETIZATION = absl_flags.DEFINE_float(
    'pld_discretization', 1e-3, '--accountant=pld: the privacy loss\'s '
    'discretization interval. The epsilon stays an upper bound at any value; '
    'above 1e-2, or where a bound may be loose by over 1%, it is refused. '
    'Untrusted and cross-silo runs that do not give it take, per client, the '
    'coarsest of 1e-3, 1e-4, ... within that 1% (DP-SGD composes thousands of '
    'steps).')
MIN_SEPARATION = absl_flags.DEFINE_integer(
    'min_separation', None, '--sampling=device: the fewest rounds between '
    'two participations of one device (1: consecutive rounds allowed).')
MAX_PARTICIPATIONS = absl_flags.DEFINE_integer(
    'max_participations', None, '--sampling=device: the most rounds one '
    'device takes part in.')
LOCAL_EPOCHS = absl_flags.DEFINE_integer('local_epochs', 1, 'Local epochs E.')
CANARIES = absl_flags.DEFINE_integer(
    'canaries', 0, 'An audit run. Trusted server: adds this many canary '
    'clients to every private group (members sampled or scheduled, clipped '
    'and noised like any other, whose update is a fixed random direction) '
    'and keeps as many unseen; reports each group\'s empirical epsilon from '
    'their scores (final model and all rounds) beside the printed one. '
    'Untrusted server: '
    'adds this many canary examples to every client\'s data (sampled and '
    'clipped like its examples, whose gradient is a fixed random direction), '
    'keeps as many unseen, and reports each client\'s empirical epsilon from '
    'every update it sent; cross-silo: the same per silo (the best run of a '
    'sweep in the table). The released model holds the canaries\' '
    'contributions; announced in the output. 1000 is the reference\'s '
    'choice. 0: none.', lower_bound=0)
COHORT_SIZE = absl_flags.DEFINE_integer(
    'cohort_size', 0, 'Trusted server and cross-silo: simulate up to this '
    'many sampled clients (silos) inside one TFF client (0 or 1: one TFF '
    'client per client). Same training, clipping, noise and accounting per '
    'client; rounds of 100 clients run ~7x faster '
    '(benchmarks/round_speed.py), School\'s 139 silos ~9x '
    '(benchmarks/silo_round_speed.py). 64 suits small models; a cohort holds '
    'about ten model-sized tensors per client, so for a large model the '
    'trusted setting lowers it to fit 2 GiB and says so.')
SIMULATE_DROPOUT = absl_flags.DEFINE_float(
    'simulate_dropout', 0.0, 'Trusted server, --sampling=device: each of a '
    'round\'s devices fails to send its update (and its noise share) with '
    'this probability, drawn from --seed. The epsilons printed are those '
    'the rounds gave: above the targets for a rule whose noise the devices '
    'add (fedhdp_ddp), whose plan assumes every device finishes; announced '
    'in the output. 0: every device finishes.')
CLIENT_LR = absl_flags.DEFINE_float('client_lr', 0.1, 'Client SGD learning rate.')
SERVER_LR = absl_flags.DEFINE_float('server_lr', 1.0, 'Server SGD learning rate.')
SERVER_MOMENTUM = absl_flags.DEFINE_float(
    'server_momentum', 0.0, 'Trusted server: momentum beta of the server\'s '
    'SGD, in [0, 1) (0: none). It reads only the released aggregates, so it '
    'costs no privacy. With --server_lr=1-beta (the step of plain SGD at '
    '1) its running average keeps (1 - beta) / (1 + beta) of the DP noise\'s '
    'variance per step.')
BATCH_SIZE = absl_flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
CLIP_NORM = absl_flags.DEFINE_float('clip_norm', 0.5, 'Initial clip norm S.')
TARGET_QUANTILE = absl_flags.DEFINE_float(
    'target_quantile', 0.5, 'Target fraction kappa of unclipped updates.')
CLIP_LR = absl_flags.DEFINE_float(
    'clip_lr', 0.2, 'Adaptive clipping learning rate eta_b (0: fixed norm).')
CLIP_COUNT_STDDEV = absl_flags.DEFINE_float(
    'clip_count_stddev', None, 'Noise std z_b of the unclipped count. '
    'Default: 5% of the expected clients per round, or, where that is too '
    'little for the target, the noise multiplier the strictest level needs '
    '(printed).')
DENOMINATOR = absl_flags.DEFINE_enum(
    'denominator', 'expected', ['expected', 'realized'],
    'Private groups\' mean denominator: expected size (privacy-sound) or the '
    'realized count.')
DITTO_LAMBDA_P = absl_flags.DEFINE_float(
    'ditto_lambda_p', None, 'Ditto lambda of private clients; setting this '
    'or --ditto_lambda_np turns personalization on (the other defaults to '
    'the same value).')
DITTO_LAMBDA_NP = absl_flags.DEFINE_float(
    'ditto_lambda_np', None, 'Ditto lambda of opt-out clients.')
DITTO_LEVEL_LAMBDAS = absl_flags.DEFINE_list(
    'ditto_level_lambdas', None, 'Ditto lambda of each private level, in '
    '--epsilons order, instead of one --ditto_lambda_p for all (the opt-out '
    'group\'s stays --ditto_lambda_np, which it needs); turns '
    'personalization on. DP-FedAvg, which trains every private client at '
    'the strictest level\'s noise, gives them that level\'s lambda.')
DITTO_NOISE_AWARE = absl_flags.DEFINE_bool(
    'ditto_noise_aware_lambdas', False, 'Ditto on, each privacy group\'s '
    'lambda from the closed form of the point-estimation model (SPEC.md §1, '
    'tff_hdp/estimation/point_estimation_theory.py) read from public '
    'quantities only: the group\'s noise multiplier, expected count and '
    'ratio, the model\'s size, --heterogeneity and --ditto_local_share; '
    'printed before training, costs no privacy. Instead of --ditto_lambda_p, '
    '--ditto_lambda_np and --ditto_level_lambdas.')
DITTO_LOCAL_SHARE = absl_flags.DEFINE_float(
    'ditto_local_share', 0.5, 'With --ditto_noise_aware_lambdas: the share '
    'of the clients\' update spread (--heterogeneity) that is a client\'s '
    'own sampling noise alpha^2 rather than the spread tau^2 of the '
    'clients\' optima; larger means less trust in a client\'s own data, '
    'larger lambdas.')
DITTO_LR = absl_flags.DEFINE_float(
    'ditto_lr', None, 'Personal model learning rate eta_p (default: '
    '--client_lr).')
SEED = absl_flags.DEFINE_integer(
    'seed', 0, 'Seed of the public random choices: data order, initial '
    'weights, which clients opt out, the clients\' epsilons. The DP noise and '
    'the sampling are drawn from a secret seed (OS entropy, kept in the '
    'checkpoint), so that the printed epsilon holds.')
RELEASE_UNPROTECTED = absl_flags.DEFINE_bool(
    'release_unprotected_stats', False, 'Trusted and untrusted server: also '
    'write statistics of private clients that the printed epsilon does NOT '
    'cover (realized counts, training loss and accuracy, Acc_g,p, Acc_l,p and '
    'Delta columns) to rounds.csv, TensorBoard and summary.json. Not private; '
    'announced in the output.')
UNSAFE_SEEDED = absl_flags.DEFINE_bool(
    'unsafe_seeded_dp_randomness', False, 'Draw the DP noise and the sampling '
    'from --seed so that runs repeat exactly. Anyone who knows the seed can '
    'remove the noise: this VOIDS the privacy guarantee. For experiments '
    'only; announced in the output.')
UNSAFE_LARGE_DELTA = absl_flags.DEFINE_bool(
    'unsafe_allow_large_delta', False, 'Accept a --deltas value at or above '
    '1/N (N: the group\'s clients, or a DP-SGD client\'s examples), which '
    'allows releasing someone\'s data outright. For experiments only.')
EVAL_EVERY = absl_flags.DEFINE_integer('eval_every', 10, 'Evaluate every k rounds.')
CHECKPOINT_EVERY = absl_flags.DEFINE_integer(
    'checkpoint_every', 10, 'Save the run state every k rounds (0: never); '
    're-running the same command resumes from the last checkpoint. A rule '
    'whose noise cannot be redone (fedhdp_ddp: TFF\'s own) saves every round, '
    'before releasing it, unless 0.')
WORKERS = absl_flags.DEFINE_list(
    'workers', None, 'host:port of TFF workers (started with run_worker.py) '
    'to run each round on, the clients cut into one contiguous slice per '
    'worker; default: one local worker listening on 127.0.0.1. The protocol '
    'has no TLS or authentication: a private network or SSH tunnels only.')
WORKER_TIMEOUT = absl_flags.DEFINE_float(
    'worker_timeout', 60, 'With --workers: seconds a worker may go without '
    'answering before the run stops, naming it (then restart it and re-run '
    'to resume).')
OUTPUT_DIR = absl_flags.DEFINE_string(
    'output_dir', None, 'Where files are written. Default: '
    'results/<task>-<8 hex digits> (reproduce.py: results/reproduce-<8 hex '
    'digits>), named by a hash of the values of the flags the run reads '
    '(all but --output_dir, --dry_run, --workers, --worker_timeout, '
    '--worker_data, --tensorboard, --plots), so two '
    'different runs never share a folder and re-running the same command '
    'resumes in it; the folder is printed at the start.')
TENSORBOARD = absl_flags.DEFINE_bool(
    'tensorboard', True, 'Trusted server: release every round\'s metrics '
    'to TensorBoard event files under <output_dir>/<configuration>/'
    'tensorboard (tff.program.TensorBoardReleaseManager; the rows of '
    'rounds.csv; a resumed run keeps one event per round).')
PLOTS = absl_flags.DEFINE_bool(
    'plots', True, 'Trusted server: draw accuracy and epsilon against the '
    'rounds, and accuracy against r, under <output_dir>/plots.')
DRY_RUN = absl_flags.DEFINE_bool(
    'dry_run', False, 'Only check the flags (reproduce.py: with each preset '
    'applied), print what the command would run and where it would write, '
    'and exit: no data is loaded (but for the number of clients, when '
    '--clip_count_stddev without --output_dir needs it to name the folder), '
    'nothing is trained or written. Checks that '
    'need the data (clients per round against the clients, delta against '
    '1/N) run when the command does.')
TRIALS = absl_flags.DEFINE_integer(
    'trials', 20000, 'point_estimation: Monte Carlo trials.')
PE_CLIENTS = absl_flags.DEFINE_integer('pe_clients', 20,
                                   'point_estimation: clients N.')
PE_PRIVATE = absl_flags.DEFINE_integer('pe_private', 19,
                                   'point_estimation: private clients N_p.')
PE_SAMPLES = absl_flags.DEFINE_integer('pe_samples', 10,
                                   'point_estimation: samples per client.')
PE_TAU2 = absl_flags.DEFINE_float('pe_tau2', 0.1, 'point_estimation: tau^2.')
PE_BETA2 = absl_flags.DEFINE_float('pe_beta2', 1.0, 'point_estimation: beta^2.')
PE_GAMMA2 = absl_flags.DEFINE_float('pe_gamma2', 0.05,
                                'point_estimation: gamma^2.')



# Largest count flag (rounds, clients, trials, ...): beyond it the accountant's
# arithmetic leaves float64 and TensorFlow's int32 counters overflow.
MAX_COUNT = 2**31 - 1
# Largest target epsilon: far past any guarantee (use nonprivate), and above
# ~1e5 dp_accounting cannot calibrate the noise at all.
MAX_EPSILON = 1000.0
# TensorFlow computes in float32, whose largest finite value is ~3.4e38 (TFF
# refuses a float32 constant from 3.4e38 up): a value it receives may be at
# most MAX_FLOAT32, one it squares at most MAX_SQUARED, one a count (up to
# MAX_COUNT) multiplies at most MAX_PER_COUNT and one it exponentiates at
# most MAX_EXPONENT (e^88.7 is float32's largest). Past them a run trains on
# inf and NaN and reports a meaningless model.
MAX_FLOAT32 = 1e38
MAX_SQUARED = 1e19
MAX_PER_COUNT = 1e29
MAX_EXPONENT = 88.0
# Flags that do not change what a run computes, so not part of the default
# output folder's name: where it goes and how it is executed.
_NOT_IN_FOLDER_NAME = ('output_dir', 'dry_run', 'workers', 'worker_timeout',
                       'worker_data', 'tensorboard', 'plots')

TRUSTED, UNTRUSTED, CROSS_SILO = (algorithms.TRUSTED, algorithms.UNTRUSTED,
                                  algorithms.CROSS_SILO)
POINT_ESTIMATION = 'point_estimation'
_TRAINING = (TRUSTED, UNTRUSTED, CROSS_SILO)
_EVERY = _TRAINING + (POINT_ESTIMATION,)

# The settings that read each flag. Giving a flag that the run's setting does
# not read is an error, not a silent no-op; --help groups the flags by it.
APPLIES: dict[str, tuple[str, ...]] = {
    'task': _EVERY, 'output_dir': _EVERY, 'dry_run': _EVERY, 'seed': _EVERY,
    'unsafe_seeded_dp_randomness': _EVERY, 'checkpoint_every': _EVERY,
    'algorithms': _TRAINING, 'data_dir': _TRAINING, 'num_clients': _TRAINING,
    'client_data': _TRAINING, 'worker_data': _TRAINING,
    'rounds': _TRAINING, 'batch_size': _TRAINING, 'client_lr': _TRAINING,
    'eval_every': _TRAINING, 'deltas': _TRAINING,
    'workers': _TRAINING, 'worker_timeout': _TRAINING,
    'unsafe_allow_large_delta': _TRAINING,
    'epsilons': (TRUSTED, CROSS_SILO), 'r': (POINT_ESTIMATION,),
    'cohort_size': (TRUSTED, CROSS_SILO),
    'dp_sgd_clip': (UNTRUSTED, CROSS_SILO),
    **{name: (TRUSTED,) for name in (
        'level_fractions', 'opt_out_fraction', 'privacy_levels_file',
        'levels_by_label',
        'clients_per_round',
        'sampling', 'min_separation', 'max_participations',
        'local_epochs', 'server_lr', 'server_momentum', 'clip_norm',
        'simulate_dropout',
        'target_quantile', 'clip_lr', 'clip_count_stddev', 'denominator',
        'ditto_lambda_p', 'ditto_lambda_np', 'ditto_level_lambdas',
        'ditto_noise_aware_lambdas', 'ditto_local_share', 'ditto_lr',
        'tensorboard', 'plots')},
    'canaries': (TRUSTED, UNTRUSTED, CROSS_SILO),
    'accountant': _TRAINING, 'pld_discretization': _TRAINING,
    'release_unprotected_stats': (TRUSTED, UNTRUSTED),
    'epsilon_distribution': (UNTRUSTED,),
    **{name: (CROSS_SILO,) for name in (
        'lambdas', 'lambdas_by_epsilon', 'silo_noise_aware_lambdas',
        'client_lrs', 'sweep',
        'num_clusters',
        'regularizer_placement',
        'selection_fraction', 'selection_share')},
    **{name: (POINT_ESTIMATION,) for name in (
        'trials', 'pe_clients', 'pe_private', 'pe_samples', 'pe_tau2',
        'pe_beta2', 'pe_gamma2')},
}


# The flags of options (one per option name): --r, shared with point
# estimation, and those define_algorithm_options defines.
_OPTION_FLAGS = {algorithms.RATIO.name}


def define_algorithm_options() -> None:
  """A flag for every option of every registered algorithm (`algorithms.
  Option`) that has none yet, read by the setting of the algorithms that
  declare it: the built-in ones' when this module is imported, those of
  algorithms user code registered when its command line starts."""
  for setting in _TRAINING:
    for name, option in algorithms.setting_options(setting).items():
      if name in absl_flags.FLAGS and name not in _OPTION_FLAGS:
        readers = ', '.join(algorithms.readers(setting, name))
        raise ValueError(f'option {name!r} of {readers}: --{name} is a flag '
                         'of the command line already; give the option '
                         'another name.')
      if name not in absl_flags.FLAGS:
        _OPTION_FLAGS.add(name)
        if option.choices:
          absl_flags.DEFINE_enum(name, option.default, list(option.choices),
                                 option.help)
        elif option.sweep or option.per_level:
          absl_flags.DEFINE_list(name, None if option.default is None else [
              f'{option.default:g}'], option.help)
        else:
          define = (absl_flags.DEFINE_integer if option.kind is int else
                    absl_flags.DEFINE_float)
          define(name, option.default, option.help)
      APPLIES[name] = tuple(dict.fromkeys(APPLIES.get(name, ()) + (setting,)))


define_algorithm_options()
# --silo_noise_aware_lambdas reads the silos' spread too.
APPLIES['heterogeneity'] += (CROSS_SILO,)


def option_values(setting: str) -> dict[str, object]:
  """The values of `setting`'s options that are not swept, by name (a
  per-level option's as a tuple)."""
  values = {}
  for name, option in algorithms.setting_options(setting).items():
    flag = absl_flags.FLAGS[name]
    if option.per_level:
      given = [option.kind(v) for v in floats(flag)] if flag.value else None
      if given and option.one_for_all and len(given) == 1:
        given *= len(_level_targets())
      values[name] = None if given is None else tuple(given)
    elif not option.sweep:
      values[name] = flag.value
  return values


def swept_values(setting: str) -> dict[str, list[float] | None]:
  """The values of `setting`'s swept options, by name (None: not given)."""
  return {name: floats(absl_flags.FLAGS[name])
          if absl_flags.FLAGS[name].value else None
          for name, option in algorithms.setting_options(setting).items()
          if option.sweep}


def _check_options(setting: str) -> None:
  """Each option of `setting` lies where its record says, and is given only
  when a chosen algorithm reads it."""
  for name, option in algorithms.setting_options(setting).items():
    flag = absl_flags.FLAGS[name]
    high = math.inf if option.high is None else option.high
    low = -math.inf if option.low is None else option.low
    for other in option.excludes:
      check(not (flag.present and absl_flags.FLAGS[other].present),
            f'--{name} and --{other}: give one of them.')
    if option.sweep and (flag.value or flag.present):
      check_distinct(f'--{name}', floats(flag, low, high, option.low_open),
                     flag.value)
    elif option.per_level and (flag.value or flag.present):
      levels = len(_level_targets())
      values = floats(flag, low, high, option.low_open)
      check(len(values) == levels or (option.one_for_all and
                                      len(values) == 1),
            f'--{name} has {len(flag.value)} values for the {levels} private '
            'levels of --epsilons; give one per level' + (
                ', or one for all.' if option.one_for_all else '.'))
      for v in values:
        check(option.kind is not int or v == int(v),
              f'--{name}: {v:g} is not a whole number.')
    elif not (option.sweep or option.per_level or option.choices):
      _in(flag, low, high, low_open=option.low_open)
    if not (name == 'heterogeneity' and DITTO_NOISE_AWARE.value):
      # The noise-aware Ditto lambdas read it with any algorithm.
      _read_by((name,), algorithms.readers(setting, name))


_SETTING_NAMES = {
    TRUSTED: 'trusted-server', UNTRUSTED: 'untrusted-server',
    CROSS_SILO: 'cross-silo', POINT_ESTIMATION: 'point-estimation'}
_GROUP_TITLES = {
    _EVERY: 'Every run',
    _TRAINING: 'Every training run (trusted server, untrusted server, '
               'cross-silo)',
    (TRUSTED,): 'Trusted server, client-level DP (--algorithms='
                f'{",".join(algorithms.names(TRUSTED))})',
    (UNTRUSTED,): 'Untrusted server, every client runs DP-SGD '
                  f'(--algorithms={",".join(algorithms.names(UNTRUSTED))})',
    (CROSS_SILO,): 'Cross-silo, silo-specific sample-level DP '
                   f'(--algorithms={",".join(algorithms.names(CROSS_SILO))})',
    (POINT_ESTIMATION,): 'Point estimation (--task=point_estimation)',
}


def help_groups() -> list[tuple[str, list[str]]]:
  """(title, flag names) for --help, one group per set of settings."""
  grouped: dict[tuple[str, ...], list[str]] = {}
  for name, settings in APPLIES.items():
    grouped.setdefault(settings, []).append(name)
  def title(settings):
    return _GROUP_TITLES.get(settings) or ' and '.join(
        _SETTING_NAMES[s] for s in settings).capitalize()
  order = list(_GROUP_TITLES)
  keys = sorted(grouped, key=lambda s: (order.index(s) if s in order
                                        else len(order), s))
  return [(title(k), sorted(grouped[k])) for k in keys]


def floats(flag, low: float = -math.inf, high: float = math.inf,
           low_open: bool = False, allow_empty: bool = False) -> list[float]:
  """The flag's comma-separated values as finite floats, each in the
  interval (`_value_in`)."""
  if not flag.value and not allow_empty:
    raise InputError(f'--{flag.name} needs at least one number.')
  try:
    values = [float(v) for v in flag.value]
  except ValueError:
    raise InputError(
        f'--{flag.name} must be comma-separated numbers, got '
        f'{",".join(flag.value)!r}.') from None
  for v in values:
    check(math.isfinite(v), f'--{flag.name} must be finite numbers, got {v}.')
    _value_in(f'--{flag.name}', v, low, high, low_open)
  return values


def check(condition: bool, message: str) -> None:
  if not condition:
    raise InputError(message)


def _in(flag, low: float, high: float = math.inf, low_open: bool = False,
        high_open: bool = False) -> None:
  """The scalar flag's value (when set) lies in the interval, finite; a
  count at most `MAX_COUNT`."""
  v = flag.value
  if v is None:
    return
  if isinstance(v, int):
    high = min(high, MAX_COUNT)
  _value_in(f'--{flag.name}', v, low, high, low_open, high_open)


def _value_in(name: str, v: float, low: float, high: float = math.inf,
              low_open: bool = False, high_open: bool = False) -> None:
  """`v`, a value of the flag `name`, lies in the interval, finite."""
  ok = (math.isfinite(v) and (v > low if low_open else v >= low) and
        (v < high if high_open else v <= high))
  if not ok:
    interval = ('(' if low_open else '[') + f'{_number(low)}, ' + (
        'inf)' if high == math.inf else _number(high) + (
            ')' if high_open else ']'))
    check(False, f'{name} must be in {interval}, got {v}.')


def _number(x: float) -> str:
  """`x` as written in an interval: a whole number in full, unless huge."""
  return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f'{x:g}'


def run_setting() -> str:
  """The setting the flags ask for (after --algorithms was checked)."""
  if TASK.value == POINT_ESTIMATION:
    return POINT_ESTIMATION
  return setting(ALGORITHMS.value[0])


def _check_algorithms() -> None:
  check(bool(ALGORITHMS.value), '--algorithms needs at least one algorithm.')
  known = sum((algorithms.names(s) for s in algorithms.SETTINGS), ())
  for a in ALGORITHMS.value:
    check(a in known, f'--algorithms: unknown algorithm {a!r}; choose from '
          f'{", ".join(known)}.')
  check_distinct('--algorithms', ALGORITHMS.value, ALGORITHMS.value)
  kinds = {setting(a) for a in ALGORITHMS.value}
  check(len(kinds) == 1, '--algorithms: trusted-server (fedhdp, dp_fedavg, '
        'nonprivate), untrusted-server and cross-silo algorithms cannot be '
        'mixed in one run.')


def _check_applies(current: str) -> None:
  for name, settings in APPLIES.items():
    if absl_flags.FLAGS[name].present and current not in settings:
      check(False, f'--{name} does not apply to {_SETTING_NAMES[current]} '
            'runs (it is read by ' + ', '.join(
                _SETTING_NAMES[s] for s in settings) + ' runs); drop it.')
  task = tasks.REGISTRY.get(TASK.value)
  if absl_flags.FLAGS['num_clients'].present and task is not None and (
      not task.chooses_clients):
    check(False, f'--num_clients does not apply to --task={TASK.value}, '
          "whose silos are its data set's own (every one is trained); drop "
          'it.')
  if DATA_DIR.value and task is not None and task.data is None:
    check(False, f'--data_dir does not apply to --task={TASK.value}, which '
          'makes its own data; drop it.')
  check(not DATA_DIR.value or os.path.isdir(DATA_DIR.value) or
        not os.path.exists(DATA_DIR.value), f'--data_dir={DATA_DIR.value} is '
        'a file, not a folder; pass the folder that holds the task\'s files.')
  if CLIENT_DATA.value:
    for name in ('task', 'data_dir', 'num_clients'):
      check(not absl_flags.FLAGS[name].present,
            f'--client_data replaces --task and its data; drop --{name}.')
    check(os.path.exists(CLIENT_DATA.value),
          f'--client_data={CLIENT_DATA.value}: no such file or folder.')
    check(not WORKER_DATA.value, '--client_data is read by the workers '
          'themselves already; drop --worker_data.')
  if WORKER_DATA.value:
    folder = os.path.dirname(os.path.abspath(WORKER_DATA.value))
    check(os.path.isdir(folder), f'--worker_data={WORKER_DATA.value}: no '
          f'folder {folder}.')


def default_output_dir(name: str, extra_flags: tuple[str, ...] = (),
                       as_default: tuple[str, ...] = ()) -> str:
  """`results/<name>-<hash>`, the folder of a run given no --output_dir.

  The hash covers every flag the run's setting reads (and `extra_flags`)
  except where and how it executes, so two different runs never share a
  folder (one would refuse the other's checkpoints, and overwrite its
  table) while the same command finds its own checkpoints again. Flags in
  `as_default` were given their default's value: the same run, hashed as
  not given.
  """
  current = run_setting()
  names = sorted(n for n, s in APPLIES.items()
                 if current in s and n not in _NOT_IN_FOLDER_NAME)
  text = json.dumps([(n, absl_flags.FLAGS[n].default if n in as_default else
                      absl_flags.FLAGS[n].value)
                     for n in names + list(extra_flags)], default=str)
  digest = hashlib.sha256(text.encode()).hexdigest()[:8]
  return os.path.join('results', f'{name}-{digest}')


def _check_output_dir() -> None:
  if OUTPUT_DIR.value is None:
    absl_flags.FLAGS['output_dir'].value = default_output_dir(
        TASK.value, as_default=('clip_count_stddev',)
        if _gives_default_clip_count_stddev() else ())
  path = os.path.abspath(OUTPUT_DIR.value)
  check(bool(OUTPUT_DIR.value), '--output_dir must not be empty.')
  existing = path
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  check(os.path.isdir(existing), f'--output_dir={OUTPUT_DIR.value}: '
        f'{existing} is a file, not a folder.')
  check(os.access(existing, os.W_OK | os.X_OK),
        f'--output_dir={OUTPUT_DIR.value}: {existing} is not writable.')
  if DRY_RUN.value:
    return  # a dry run writes nothing
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    check(False, f'--output_dir={OUTPUT_DIR.value}: cannot create it '
          f'({e.strerror}).')


def _gives_default_clip_count_stddev() -> bool:
  """Whether --clip_count_stddev is given the value the run takes without
  it (`plans.default_clip_count_stddev`, compared as `cli.trusted` does).
  That value depends on the task's number of clients: this loads the data."""
  if (run_setting() != TRUSTED or CLIP_COUNT_STDDEV.value is None or
      CLIP_LR.value == 0):
    return False
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  n = len(_own_task().client_ids)
  if CLIENTS_PER_ROUND.value > n:
    return False  # refused once the run has the data
  try:
    value, _ = plans.default_clip_count_stddev(
        private_levels(), client_sampling(n), ROUNDS.value, n)
  except accounting.InfeasiblePrivacyTargetError:
    return False  # no default; the run says why
  return math.isclose(CLIP_COUNT_STDDEV.value, value, rel_tol=1e-9)


def client_sampling(n: int):
  """How --sampling draws --clients_per_round of `n` clients each round (or,
  with device, takes them from the devices their rule lets check in)."""
  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import accounting
  from tff_hdp.privacy import min_separation
  # pylint: enable=g-import-not-at-top
  if SAMPLING.value == 'poisson':
    return accounting.PoissonSampling(
        CLIENTS_PER_ROUND.value / n,
        accounting.Accountant(ACCOUNTANT.value, PLD_DISCRETIZATION.value))
  if SAMPLING.value == 'device':
    return min_separation.DeviceParticipation(
        n, CLIENTS_PER_ROUND.value, MIN_SEPARATION.value,
        MAX_PARTICIPATIONS.value)
  return accounting.FixedSizeSampling(n, CLIENTS_PER_ROUND.value)


def validate_flags() -> None:
  """Every check that needs no data; an `InputError` names the flag.

  An absent --output_dir gets its default folder here
  (`default_output_dir`), as checking the folder needs it.
  """
  if TASK.value != POINT_ESTIMATION:
    _check_algorithms()
  current = run_setting()
  _check_applies(current)
  _check_values(current)
  _check_output_dir()  # last: it creates the folder, for a valid command only


def _check_participation() -> None:
  """--min_separation and --max_participations: both with --sampling=device,
  neither without it."""
  device = SAMPLING.value == 'device'
  for flag in (MIN_SEPARATION, MAX_PARTICIPATIONS):
    if device:
      check(flag.value is not None, f'--sampling=device needs --{flag.name}: '
            "the devices' participation rule is what the epsilon rests on.")
      _in(flag, 1)
    else:
      check(flag.value is None, f'--{flag.name} applies only with '
            '--sampling=device (devices that enforce their own '
            f'participation); drop it or pass --sampling=device.')


def _check_dropout() -> None:
  """--simulate_dropout: in [0, 1), with devices that take part in rounds
  of exactly --clients_per_round (whose counts the accounting reads), and
  without canaries (which would drop out as members do)."""
  _in(SIMULATE_DROPOUT, 0, 1, high_open=True)
  if SIMULATE_DROPOUT.value:
    check(SAMPLING.value == 'device', '--simulate_dropout drops devices from '
          'rounds of --clients_per_round: pass --sampling=device.')
    check(not CANARIES.value, '--simulate_dropout with --canaries: an audit '
          'run\'s canaries take part as planned; drop one.')


def _check_levels_file() -> None:
  """--privacy_levels_file replaces the random levels, and its levels are
  the flags' (its clients are checked against the task's once loaded)."""
  own = [f for f in (PRIVACY_LEVELS_FILE, LEVELS_BY_LABEL)
         if f.value is not None]
  if not own:
    return
  check(len(own) == 1, '--privacy_levels_file and --levels_by_label each '
        'give every client its level: drop one.')
  for flag in (OPT_OUT, LEVEL_FRACTIONS):
    check(not flag.present, f'--{flag.name} draws levels at random; '
          f'--{own[0].name} gives each client its own: drop one.')
  if PRIVACY_LEVELS_FILE.value is not None:
    levels_file()
  else:
    label_bands()


def label_bands():
  """--levels_by_label's [(labels, level)], each level one of the flags'
  (an InputError naming the flag otherwise)."""
  from tff_hdp.privacy import privacy_groups  # pylint: disable=g-import-not-at-top
  try:
    bands = privacy_groups.parse_label_bands(LEVELS_BY_LABEL.value)
    as_file = dict(zip(LEVELS_BY_LABEL.value.split(','),
                       (level for _, level in bands)))
    privacy_groups.assign_from_levels(list(as_file), private_levels(),
                                      as_file)
  except ValueError as e:
    raise InputError(f'--levels_by_label={LEVELS_BY_LABEL.value}: '
                     f'{str(e).replace("client ", "band ")}') from None
  return bands


def levels_file() -> dict[str, str]:
  """--privacy_levels_file's {client id: level}, each level one of the
  flags' and each chosen (an InputError naming the file otherwise); the
  clients are checked against the task's once it is loaded."""
  from tff_hdp.privacy import privacy_groups  # pylint: disable=g-import-not-at-top
  path = PRIVACY_LEVELS_FILE.value
  try:
    levels = privacy_groups.read_levels_file(path)
    privacy_groups.assign_from_levels(list(levels), private_levels(), levels)
  except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
    reason = e.strerror if isinstance(e, OSError) else e
    raise InputError(f'--privacy_levels_file={path}: {reason}') from None
  return levels


def _check_epsilons() -> None:
  for e in floats(EPSILONS):
    check(e > 0, f'--epsilons must be > 0, got {e}.')
    check(e <= MAX_EPSILON, f'--epsilons must be in (0, {MAX_EPSILON:g}], '
          f'got {e:g}: an epsilon this large promises nothing '
          '(--algorithms=nonprivate trains without noise).')


def _check_level_fractions() -> None:
  if LEVEL_FRACTIONS.value:
    fractions = floats(LEVEL_FRACTIONS)
    check(len(fractions) == len(EPSILONS.value),
          f'--level_fractions has {len(fractions)} values for '
          f'{len(EPSILONS.value)} --epsilons.')
    check(all(0 < f <= 1 for f in fractions) and
          math.isclose(sum(fractions), 1.0, abs_tol=1e-6),
          '--level_fractions must be in (0, 1] (a level without clients is '
          'no level) and sum to 1, got '
          f'{",".join(LEVEL_FRACTIONS.value)}.')


def _check_clip_count() -> None:
  """Noise on a count of clients: more than any count (MAX_COUNT) estimates
  nothing, and the accountant's z_eff = (z^-2 + (2 z_b)^-2)^-1/2 search
  never ends once 2 z_b overflows; none releases the count exactly."""
  check(not (CLIP_COUNT_STDDEV.value == 0 and CLIP_LR.value > 0),
        f'--clip_count_stddev must be in (0, {MAX_COUNT}] with adaptive '
        'clipping, got 0: the clip count it adapts to would be released '
        'without noise; pass --clip_lr=0 to fix the clip norm instead.')
  _in(CLIP_COUNT_STDDEV, 0, MAX_COUNT, low_open=CLIP_LR.value > 0)


def _check_accountant(sampled: bool = True) -> None:
  """--accountant=pld analyses Poisson sampling only (`sampled`: the
  trusted setting's --sampling; DP-SGD always samples); --pld_discretization
  goes with it, no coarser than the bound's stated tolerance."""
  if sampled:
    check(not (ACCOUNTANT.present and ACCOUNTANT.value == 'pld' and
               SAMPLING.value != 'poisson'),
          f'--accountant=pld analyses --sampling=poisson; --sampling='
          f'{SAMPLING.value} has one analysis ('
          f'{"RDP" if SAMPLING.value == "fixed" else "the exact Gaussian curve"}'
          '): drop --accountant.')
  if PLD_DISCRETIZATION.present:
    check(ACCOUNTANT.value == 'pld' and (
        not sampled or SAMPLING.value == 'poisson'),
          '--pld_discretization applies only with --accountant=pld' + (
              ' and --sampling=poisson' if sampled else '') + '; drop it.')
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  _in(PLD_DISCRETIZATION, 0, accounting.MAX_PLD_DISCRETIZATION,
      low_open=True)


def _check_device_algorithms() -> None:
  """The algorithms whose noise is accounted for devices only run with
  --sampling=device, and --level_participations lie within its cap: the
  checks their plan and factory make, before TensorFlow loads."""
  for name in ALGORITHMS.value:
    check(not algorithms.REGISTRY[name].device_only or
          SAMPLING.value == 'device',
          f'--algorithms={name}: {algorithms.DEVICE_ONLY}')
    check(not algorithms.REGISTRY[name].poisson_only or
          SAMPLING.value == 'poisson',
          f'--algorithms={name}: {algorithms.POISSON_ONLY}')
  caps = absl_flags.FLAGS['level_participations']
  bits = absl_flags.FLAGS['ddp_bits']
  try:
    if caps.value and MAX_PARTICIPATIONS.value is not None:
      algorithms.check_level_participations(floats(caps),
                                            MAX_PARTICIPATIONS.value)
    if any('ddp_bits' in (o.name for o in algorithms.REGISTRY[name].options)
           for name in ALGORITHMS.value):
      algorithms.check_ddp_bits(floats(bits), CLIENTS_PER_ROUND.value,
                                [g.name for g in private_levels()])
  except ValueError as e:
    raise InputError(str(e)) from None
  check(absl_flags.FLAGS['ddp_slots'].value != 'own_group' or
        COHORT_SIZE.value > 1, '--ddp_slots=own_group runs in cohorts only '
        '(TFF\'s per-device distributed-DP sum adds every client\'s noise '
        'share to every sum): give --cohort_size of 2 or more.')


def _check_values(current: str) -> None:
  """The values of the flags that the `current` setting reads."""
  _in(SEED, 0, 2**31 - 1)
  _in(CHECKPOINT_EVERY, 0)
  if current == POINT_ESTIMATION:
    _check_ratios()
    _check_point_estimation()
    return
  _in(NUM_CLIENTS, 1)
  _in(ROUNDS, 1)
  _in(BATCH_SIZE, 1)
  # Untrusted: squared in the update's noise variance, whose inverse weighs
  # a client (`plans.ClientPrivacy.update_noise_variance`).
  _in(CLIENT_LR, 0, MAX_SQUARED if current == UNTRUSTED else MAX_FLOAT32,
      low_open=True)
  _in(EVAL_EVERY, 1)
  _in(CANARIES, 0)
  _check_workers()
  for d in floats(DELTAS):
    check(0 < d < 1, f'--deltas must be in (0, 1), got {d}.')
  if current in (TRUSTED, CROSS_SILO):
    _in(COHORT_SIZE, 0)
    _check_epsilons()
  if current == TRUSTED:
    _level_targets()
  if current in (UNTRUSTED, CROSS_SILO):
    _check_accountant(sampled=False)
    # Squared in a client's update noise variance, as --client_lr.
    _in(DP_SGD_CLIP, 0, MAX_SQUARED, low_open=True)
    check(len(DELTAS.value) == 1,
          f'--deltas: the {_SETTING_NAMES[current]} setting has one delta '
          f'for every {"client" if current == UNTRUSTED else "silo"}, got '
          f'{",".join(DELTAS.value)}.')
  if current in _TRAINING:
    _check_options(current)
    no_cohorts = [a for a in ALGORITHMS.value
                  if not algorithms.REGISTRY[a].cohorts]
    check(not (COHORT_SIZE.present and COHORT_SIZE.value > 1 and no_cohorts),
          f'--cohort_size: {", ".join(no_cohorts)} train one TFF client per '
          'client (their records run no cohorts); drop --cohort_size.')
  if current == TRUSTED:
    _in(CLIENTS_PER_ROUND, 1)
    _check_participation()
    _check_dropout()
    _check_accountant()
    _check_device_algorithms()
    _check_levels_file()
    _in(OPT_OUT, 0, 1)
    check(not (OPT_OUT.value == 1 and 'fedhdp' in ALGORITHMS.value),
          '--opt_out_fraction=1 leaves fedhdp no private clients; give a '
          'fraction below 1.')
    _in(LOCAL_EPOCHS, 1)
    _in(SERVER_LR, 0, MAX_FLOAT32, low_open=True)
    _in(SERVER_MOMENTUM, 0, 1, high_open=True)
    # The noise, z_j S a coordinate, reaches the model's deltas, whose norms
    # square it (the canary audit's scores).
    _in(CLIP_NORM, 0, MAX_SQUARED, low_open=True)
    _in(TARGET_QUANTILE, 0, 1)
    # S changes by a factor exp(eta_b (kappa - b_bar)), up to exp(eta_b).
    _in(CLIP_LR, 0, MAX_EXPONENT)
    _check_clip_count()
    for flag in (DITTO_LAMBDA_P, DITTO_LAMBDA_NP):
      _in(flag, 0, MAX_FLOAT32)
    _check_ditto_noise_aware()
    _check_ditto_level_lambdas()
    _in(DITTO_LR, 0, MAX_FLOAT32, low_open=True)
    check(DITTO_LR.value is None or ditto_on(), '--ditto_lr applies only '
          'with --ditto_lambda_p, --ditto_lambda_np, --ditto_level_lambdas or '
          '--ditto_noise_aware_lambdas (Ditto on); drop it.')
    rate = DITTO_LR.value or CLIENT_LR.value
    _check_pull_steps(
        [(f'--{f.name}', f.value) for f in (DITTO_LAMBDA_P, DITTO_LAMBDA_NP)
         if f.value is not None] +
        [('--ditto_level_lambdas', v) for v in (
            floats(DITTO_LEVEL_LAMBDAS) if DITTO_LEVEL_LAMBDAS.value else [])],
        [(f'--{"ditto_lr" if DITTO_LR.value else "client_lr"}', rate)])
    _check_level_fractions()
    # Every level holds clients (the data check refuses one that does not);
    # the opt-out group holds them when some clients opt out.
    check_group_weights([True] * len(_level_targets()) + [OPT_OUT.value > 0])
  if current == CROSS_SILO:
    lambdas = floats(LAMBDAS, 0, MAX_FLOAT32)
    check_distinct('--lambdas', lambdas, LAMBDAS.value)
    if CLIENT_LRS.value is not None:
      rates = floats(CLIENT_LRS, 0, MAX_FLOAT32, low_open=True)
      check_distinct('--client_lrs', rates, CLIENT_LRS.value)
    pairs = epsilon_lambdas()
    _check_silo_noise_aware()
    if REGULARIZER_PLACEMENT.value == 'after_noise':
      _check_pull_steps(
          [('--lambdas_by_epsilon', lam) for _, lam in pairs] if pairs else
          [('--lambdas', lam) for lam in lambdas] if LAMBDAS.present else [],
          [('--client_lrs', r) for r in rates] if CLIENT_LRS.value else
          [('--client_lr', CLIENT_LR.value)])
    _read_by(('lambdas', 'lambdas_by_epsilon', 'silo_noise_aware_lambdas',
              'regularizer_placement'), tuple(
        a.name for a in algorithms.REGISTRY.values()
        if a.setting == CROSS_SILO and a.regularized))
    _read_by(('num_clusters', 'selection_fraction', 'selection_share'), tuple(
        a.name for a in algorithms.REGISTRY.values()
        if a.setting == CROSS_SILO and a.clustered))
    _in(NUM_CLUSTERS, 1)
    _in(SELECTION_FRACTION, 0, 1)
    _in(SELECTION_SHARE, 0, 1, low_open=True, high_open=True)


def _check_pull_steps(lambdas: list[tuple[str, float]],
                      rates: list[tuple[str, float]]) -> None:
  """An InputError unless every given lambda's pull, added to the gradient
  as a step of every given learning rate, contracts toward the anchor:
  each step multiplies w - anchor by 1 - rate * lambda, so at rate * lambda
  >= 2 the personal model moves away from the global one further every
  step."""
  for name, lam in lambdas:
    for rate_name, rate in rates:
      check(rate * lam < 2, f'{name}={lam:g} with {rate_name}={rate:g}: the '
            f'pull\'s step (learning rate x lambda = {rate * lam:g}, 2 or '
            'more) overshoots the global model further every step, so the '
            f'personal model diverges; give lambda < {2 / rate:g} or a '
            'smaller learning rate.')


def epsilon_lambdas() -> tuple[tuple[float, float], ...] | None:
  """--lambdas_by_epsilon's (epsilon, lambda) pairs, one for each epsilon
  of --epsilons (None: not given); an InputError names the flag."""
  text = LAMBDAS_BY_EPSILON.value
  if text is None:
    return None
  check(not LAMBDAS.present, '--lambdas_by_epsilon and --lambdas: give one '
        'of them (a lambda per silo epsilon, or lambdas for every silo).')
  name = f'--lambdas_by_epsilon={text}'
  pairs = []
  for item in text.split(','):
    try:
      eps, lam = (float(v) for v in item.split(':'))
    except ValueError:
      raise InputError(f'{name}: write epsilon:lambda pairs, e.g. '
                       '1:0.5,10:0.1.') from None
    _value_in('--lambdas_by_epsilon', lam, 0, MAX_FLOAT32)
    check(eps not in dict(pairs), f'{name}: epsilon {eps:g} twice.')
    pairs.append((eps, lam))
  silos = set(floats(EPSILONS))
  extra = [e for e, _ in pairs if e not in silos]
  check(not extra, f'{name}: no silo is at epsilon '
        f'{", ".join(f"{e:g}" for e in extra)} (--epsilons).')
  missing = sorted(silos - set(dict(pairs)))
  check(not missing, f'{name}: no lambda for the silos at epsilon '
        f'{", ".join(f"{e:g}" for e in missing)} (--epsilons).')
  return tuple(pairs)


def _check_silo_noise_aware() -> None:
  """--silo_noise_aware_lambdas replaces the given lambdas, and a
  cross-silo run reads --heterogeneity, finite and > 0, only with it."""
  spread = absl_flags.FLAGS['heterogeneity']
  if not SILO_NOISE_AWARE.value:
    check(not spread.present, '--heterogeneity applies to cross-silo runs '
          'only with --silo_noise_aware_lambdas; drop it.')
    return
  for flag in (LAMBDAS, LAMBDAS_BY_EPSILON):
    check(not flag.present, f'--silo_noise_aware_lambdas and --{flag.name}: '
          'give one of them (lambdas from the noise, or given).')
  _in(spread, 0, algorithms.MAX_RATIO, low_open=True)


def silo_heterogeneity() -> float:
  """--heterogeneity as --silo_noise_aware_lambdas reads it: the silos'
  assumed spread, 1 when not given."""
  spread = absl_flags.FLAGS['heterogeneity'].value
  return 1.0 if spread is None else spread


def ditto_on() -> bool:
  """Whether a Ditto lambda flag turns personalization on."""
  return DITTO_NOISE_AWARE.value or any(f.value is not None for f in (
      DITTO_LAMBDA_P, DITTO_LAMBDA_NP, DITTO_LEVEL_LAMBDAS))


def _check_ditto_noise_aware() -> None:
  """--ditto_noise_aware_lambdas replaces the given lambdas, and
  --ditto_local_share, in (0, 1), applies only with it."""
  if not DITTO_NOISE_AWARE.value:
    check(not DITTO_LOCAL_SHARE.present, '--ditto_local_share applies only '
          'with --ditto_noise_aware_lambdas; drop it.')
    return
  for flag in (DITTO_LAMBDA_P, DITTO_LAMBDA_NP, DITTO_LEVEL_LAMBDAS):
    check(flag.value is None, f'--ditto_noise_aware_lambdas and '
          f'--{flag.name}: give one of them (lambdas from the noise, or '
          'given).')
  _in(DITTO_LOCAL_SHARE, 0, 1, low_open=True, high_open=True)


def _check_ditto_level_lambdas() -> None:
  """--ditto_level_lambdas: one finite lambda >= 0 per private level, with
  the opt-out group's given by --ditto_lambda_np and no --ditto_lambda_p."""
  flag = DITTO_LEVEL_LAMBDAS
  if flag.value is None:
    return
  lambdas = floats(flag, 0, MAX_FLOAT32)
  levels = len(_level_targets())
  check(len(lambdas) == levels, f'--ditto_level_lambdas has {len(lambdas)} '
        f'values for the {levels} private levels of --epsilons; give one per '
        'level (the opt-out group\'s is --ditto_lambda_np).')
  check(DITTO_LAMBDA_P.value is None, '--ditto_level_lambdas and '
        '--ditto_lambda_p: give one of them (one lambda per private level, '
        'or one for all).')
  check(DITTO_LAMBDA_NP.value is not None, '--ditto_level_lambdas gives the '
        'private levels\' lambdas; give the opt-out group\'s with '
        '--ditto_lambda_np.')


# The flags plan.py reads: a trusted run's population, levels, sampling and
# clipping, without the data or the training.
PLAN_FLAGS = ('task', 'num_clients', 'epsilons', 'deltas', 'level_fractions',
              'opt_out_fraction', 'rounds', 'clients_per_round', 'accountant',
              'pld_discretization', 'clip_lr', 'clip_count_stddev',
              'heterogeneity', 'tilt', 'seed', 'unsafe_allow_large_delta')


def plan_clients() -> int:
  """N for plan.py: --num_clients, else --task's own count."""
  if NUM_CLIENTS.value is not None:
    return NUM_CLIENTS.value
  count = tasks.REGISTRY[TASK.value].num_clients if (
      TASK.value in tasks.REGISTRY) else None
  check(count is not None, f'--task={TASK.value} has no fixed number of '
        'clients (it takes every client of its data); give --num_clients.')
  return count


def check_plan_flags(own: tuple[str, ...] = ()) -> None:
  """plan.py's flags (`PLAN_FLAGS` and its `own`), checked as a trusted
  run checks them; any other flag given is refused, naming it."""
  for name in APPLIES:
    check(not absl_flags.FLAGS[name].present or name in PLAN_FLAGS + own,
          f'--{name} does not apply to planning (it reads '
          f'{", ".join("--" + n for n in PLAN_FLAGS + own)}); drop it.')
  _in(SEED, 0, 2**31 - 1)
  _in(NUM_CLIENTS, 1)
  _in(ROUNDS, 1)
  _in(CLIENTS_PER_ROUND, 1)
  for d in floats(DELTAS):
    check(0 < d < 1, f'--deltas must be in (0, 1), got {d}.')
  _check_epsilons()
  _level_targets()
  _in(OPT_OUT, 0, 1, high_open=True)
  _check_level_fractions()
  _check_accountant()
  _in(CLIP_LR, 0, MAX_EXPONENT)
  _check_clip_count()
  _in(absl_flags.FLAGS['heterogeneity'], 0, algorithms.MAX_RATIO,
      low_open=True)
  _in(absl_flags.FLAGS['tilt'], 0, 1)
  n = plan_clients()
  check(CLIENTS_PER_ROUND.value <= n, f'--clients_per_round='
        f'{CLIENTS_PER_ROUND.value} exceeds the {n} clients.')


def check_group_weights(has_clients: list[bool]) -> None:
  """FedHDP weighs group j by r_j N_j: over the groups that have clients
  (`has_clients`: the private levels in --epsilons order, then the opt-out
  group, whose ratio is 1) the ratios of --level_ratios, or of each --r,
  must not all be 0, else every weight is 0 and the model never moves."""
  levels = len(has_clients) - 1
  given = []
  level_ratios = absl_flags.FLAGS['level_ratios']
  if level_ratios.value:
    given.append((f'--level_ratios={",".join(level_ratios.value)}',
                  floats(level_ratios)))
  if R.value:
    given += [(f'--r={r:g}', [r] * levels) for r in floats(R)]
  for name, ratios in given:
    check(any(r > 0 for r, has in zip(ratios + [1.0], has_clients) if has),
          f'{name} with --opt_out_fraction={OPT_OUT.value:g} weighs every '
          'group that has clients 0 (no client opts out), so the model never '
          'moves; give a private level a ratio above 0.')


def _check_workers() -> None:
  addresses = WORKERS.value or []
  for address in addresses:
    try:
      workers.parse_address(address)
    except ValueError as e:
      check(False, f'--workers: {e}; write host:port,host:port,...')
  check_distinct('--workers', addresses, addresses)
  # Waited for by threads and gRPC, which take at most TIMEOUT_MAX seconds.
  _in(WORKER_TIMEOUT, 0, threading.TIMEOUT_MAX, low_open=True)
  check(not (WORKER_TIMEOUT.present and not addresses),
        '--worker_timeout applies only with --workers; drop it.')


def init_runtime() -> None:
  """Installs TFF's execution context: local, or across --workers."""
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
  runtime.init(WORKERS.value or (), WORKER_TIMEOUT.value)


def _check_ratios() -> None:
  # FedHDP weighs a group r_j N_j, in float32.
  if R.value:
    check_distinct('--r', floats(R, 0, MAX_PER_COUNT), R.value)


def _check_point_estimation() -> None:
  """The sizes and variances of point estimation, whose Monte Carlo runs
  FedHDP's float32 aggregator on every trial at once
  (`tff_hdp.estimation.point_estimation`)."""
  _in(TRIALS, 1)
  _in(PE_CLIENTS, 2)
  _in(PE_PRIVATE, 1, PE_CLIENTS.value - 1)  # both groups, as the theory
  _in(PE_SAMPLES, 1)
  # lambda_np* = beta^2 / (n_s tau^2); the private group's noise std is
  # N_p gamma, in float32 (gamma at most MAX_PER_COUNT).
  _in(PE_TAU2, 0, low_open=True)
  _in(PE_BETA2, 0, low_open=True)
  _in(PE_GAMMA2, 0, 1e58)
  # The aggregator's clip norm, 1e6, must never clip: a client's estimates
  # (phi = 1) over the trials, of squared norm about trials (1 + tau^2 +
  # beta^2 / n_s), stay below a tenth of it.
  check(TRIALS.value * (1 + PE_TAU2.value + PE_BETA2.value / PE_SAMPLES.value)
        <= 1e10, f'--pe_tau2={PE_TAU2.value:g}, --pe_beta2={PE_BETA2.value:g} '
        f'and --trials={TRIALS.value}: a client\'s estimates over the trials '
        'would reach the norm at which the Monte Carlo\'s aggregator clips '
        '(1e6); keep trials x (1 + tau^2 + beta^2 / pe_samples) at most 1e10.')
  # Its draws, N x n_s x trials float64 numbers, twice, fit in memory.
  need = 16 * PE_CLIENTS.value * PE_SAMPLES.value * TRIALS.value / 2**30
  have = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30
  check(need <= have, f'--trials={TRIALS.value}, --pe_clients='
        f'{PE_CLIENTS.value} and --pe_samples={PE_SAMPLES.value}: the Monte '
        f'Carlo\'s draws take {need:,.0f} GiB, more than this machine\'s '
        f'{have:.3g} GiB of memory.')


def _read_by(names: tuple[str, ...], readers: tuple[str, ...]) -> None:
  """The flags `names`, which only the algorithms `readers` read, are given
  only when --algorithms runs one of them: else they would change nothing."""
  if any(a in ALGORITHMS.value for a in readers):
    return
  runs = f'--algorithms={",".join(ALGORITHMS.value)}'
  for name in names:
    check(not absl_flags.FLAGS[name].present,
          f'--{name} is read by {", ".join(readers)} only, ' + (
              f'which {runs} does not run' if len(readers) == 1 else
              f'none of which {runs} runs') + '; drop it.')


def check_distinct(name: str, values, written: list[str]) -> None:
  """A list flag whose values are one run each names no value twice (it
  would train or count the same run twice)."""
  check(len(set(values)) == len(values),
        f'{name} lists a value twice: {",".join(written)}.')


def setting(algorithm: str) -> str:
  """The setting of a known algorithm (its registry record's)."""
  return algorithms.REGISTRY[algorithm].setting


def _level_targets() -> list[tuple[float, float]]:
  """(epsilon, delta) of each private level, each level once."""
  eps = floats(EPSILONS)
  deltas = floats(DELTAS)
  if len(deltas) == 1:
    deltas = deltas * len(eps)
  check(len(deltas) == len(eps),
        f'--deltas has {len(deltas)} values for {len(eps)} --epsilons.')
  targets = list(zip(eps, deltas))
  for i, target in enumerate(targets):
    check(target not in targets[:i],
          f'--epsilons/--deltas give the level (epsilon={target[0]:g}, '
          f'delta={target[1]:g}) twice; list each level once.')
  return targets


def private_levels():
  """The private levels, named by epsilon (and delta or the exact epsilon
  where the short names of two levels would coincide)."""
  from tff_hdp.privacy.privacy_groups import PrivacyGroup  # pylint: disable=g-import-not-at-top
  targets = _level_targets()
  names = [f'private_eps{e:g}' for e, _ in targets]
  if len(set(names)) < len(names):
    names = [f'private_eps{e!r}_delta{d:g}' for e, d in targets]
  return [PrivacyGroup(name, e, d) for name, (e, d) in zip(names, targets)]


def load_task():
  """The task the flags name; with TFF workers that read its clients
  themselves (--client_data, --worker_data), each has been checked to read
  them (`runtime.check_workers_read`)."""
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top
  task = _own_task()
  if CLIENT_DATA.value:
    path = os.path.abspath(CLIENT_DATA.value)
    for note in task.clients.notes:
      print(f'--client_data: {note}')
    runtime.check_workers_read(task, path)
    return task
  if WORKER_DATA.value:
    path = os.path.abspath(WORKER_DATA.value)
    from tff_hdp.tasks import client_data  # pylint: disable=g-import-not-at-top
    try:
      task = client_data.stored_task(task, path)
    except ValueError as e:
      raise InputError(f'--worker_data: {e}') from None
    runtime.check_workers_read(task, path)
  return task


def _own_task():
  """The task the flags name, as this process reads it (`load_task` adds
  the workers' reading)."""
  if not CLIENT_DATA.value:
    return _load_registered_task()
  path = os.path.abspath(CLIENT_DATA.value)
  from tff_hdp.tasks import client_data  # pylint: disable=g-import-not-at-top
  try:
    return client_data.load_task(path, os.path.basename(path),
                                 BATCH_SIZE.value)
  except ValueError as e:
    raise InputError(f'--client_data: {e}') from None


def _load_registered_task():
  from tff_hdp.federated_task import TaskOptions  # pylint: disable=g-import-not-at-top
  data_dir = DATA_DIR.value or tasks.REGISTRY[TASK.value].default_data_dir()
  try:
    return tasks.load(
        TASK.value,
        TaskOptions(data_dir=data_dir,
                          batch_size=BATCH_SIZE.value, seed=SEED.value,
                          num_clients=NUM_CLIENTS.value))
  except ValueError as e:
    # Where the folder an error names comes from (not a --num_clients one).
    where = '' if DATA_DIR.value or not data_dir or data_dir not in str(
        e) else (f' (the default --data_dir, under ${tasks.DATA_ROOT_ENV} or '
                 '../shared/data; pass --data_dir=DIR)')
    raise InputError(f'--task={TASK.value}: {e}{where}') from None


def _data_flag() -> str:
  return (f'--client_data={CLIENT_DATA.value}' if CLIENT_DATA.value else
          f'--task={TASK.value}')


def run_summary() -> str:
  """One line: what the flags ask for and where it goes (--dry_run)."""
  current = run_setting()
  if current == POINT_ESTIMATION:
    what = (f'point estimation at r={",".join(R.value or ["1"])}, '
            f'{TRIALS.value} trials')
  else:
    what = (f'{_SETTING_NAMES[current]} runs of {",".join(ALGORITHMS.value)} '
            f'on {_data_flag()}, {ROUNDS.value} rounds')
    if 'fedhdp' in ALGORITHMS.value:
      what += (f', r={",".join(R.value)}' if R.value else
               ', level ratios ' + (','.join(absl_flags.FLAGS.level_ratios)
                                    if absl_flags.FLAGS.level_ratios else
                                    'noise-aware'))
    data = None if CLIENT_DATA.value else (
        DATA_DIR.value or tasks.REGISTRY[TASK.value].default_data_dir())
    if data:
      what += (f', data in {data} '
               f'({"found" if os.path.isdir(data) else "not found"})')
  return f'{what}; files in {OUTPUT_DIR.value}/'


def dp_sgd_accounting() -> dict:
  """The untrusted and cross-silo settings' accountant fields: --accountant
  and a --pld_discretization that was given (None: each client's own,
  `plans.dp_sgd_accountant`)."""
  return {'accountant': ACCOUNTANT.value,
          'pld_discretization': (PLD_DISCRETIZATION.value
                                 if PLD_DISCRETIZATION.present else None)}

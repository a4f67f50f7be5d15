"""Every flag of run_experiment.py, grouped by the setting that reads it, and
their validation: a bad value is an `InputError` naming the flag, reported
as one line (exit 2 from absl for unknown flags, `sys.exit` message else).

Algorithm names come from the library's registry
(`tff_hdp.learning.algorithms`), so a registered rule is selectable here
without an edit.
"""

from __future__ import annotations

from absl import flags as absl_flags

import tasks
from tff_hdp.learning import algorithms

# Common to every setting: the task, its data and the run.
TASK = absl_flags.DEFINE_enum('task', 'digits',
                          sorted(tasks.REGISTRY) + ['point_estimation'],
                          'Task to run.')
DATA_DIR = absl_flags.DEFINE_string(
    'data_dir', None, 'Directory with the task\'s data files (real datasets).')
NUM_CLIENTS = absl_flags.DEFINE_integer(
    'num_clients', None, 'Number of clients, for tasks that allow choosing it.')
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
    'epsilon_distribution', 'mixgauss1',
    ['mixgauss1', 'mixgauss2', 'mixgauss3', 'uniform'],
    'Untrusted server: distribution of the clients\' epsilons.')
DP_SGD_CLIP = absl_flags.DEFINE_float(
    'dp_sgd_clip', 1.0, 'Untrusted server and cross-silo: DP-SGD\'s '
    'per-example clip norm c.')
R = absl_flags.DEFINE_list(
    'r', ['1.0'], 'FedHDP ratio(s) r of the private groups\' weight (the '
    'opt-out group has r=1); each value is one configuration.')
EPSILONS = absl_flags.DEFINE_list(
    'epsilons', ['3.6'], 'Target epsilon of each private level (cross-silo: '
    'one value for every silo, or one per silo).')
DELTAS = absl_flags.DEFINE_list(
    'deltas', ['1e-4'], 'Target delta of each private level (one value, or '
    'one per level).')
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
    'sampling', 'poisson', ['poisson', 'fixed'],
    'Client sampling; the accountant uses the matching event.')
LOCAL_EPOCHS = absl_flags.DEFINE_integer('local_epochs', 1, 'Local epochs E.')
COHORT_SIZE = absl_flags.DEFINE_integer(
    'cohort_size', 0, 'fedhdp, dp_fedavg, nonprivate: simulate up to this '
    'many sampled clients inside one TFF client (0 or 1: one TFF client per '
    'client). Same training, clipping, noise and accounting per client; '
    'rounds of 100 clients run ~15x faster (benchmarks/round_speed.py). 64 '
    'suits small models; a cohort holds that many model-sized updates, so '
    'use less for large ones.')
CLIENT_LR = absl_flags.DEFINE_float('client_lr', 0.1, 'Client SGD learning rate.')
SERVER_LR = absl_flags.DEFINE_float('server_lr', 1.0, 'Server SGD learning rate.')
BATCH_SIZE = absl_flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
CLIP_NORM = absl_flags.DEFINE_float('clip_norm', 0.5, 'Initial clip norm S.')
TARGET_QUANTILE = absl_flags.DEFINE_float(
    'target_quantile', 0.5, 'Target fraction kappa of unclipped updates.')
CLIP_LR = absl_flags.DEFINE_float(
    'clip_lr', 0.2, 'Adaptive clipping learning rate eta_b (0: fixed norm).')
CLIP_COUNT_STDDEV = absl_flags.DEFINE_float(
    'clip_count_stddev', None, 'Noise std z_b of the unclipped count '
    '(default: 5% of the expected clients per round).')
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
DITTO_LR = absl_flags.DEFINE_float(
    'ditto_lr', None, 'Personal model learning rate eta_p (default: '
    '--client_lr).')
SEED = absl_flags.DEFINE_integer(
    'seed', 0, 'Seed of the public random choices: data order, initial '
    'weights, which clients opt out, the clients\' epsilons. The DP noise and '
    'the sampling are drawn from a secret seed (OS entropy, kept in the '
    'checkpoint), so that the printed epsilon holds.')
RELEASE_UNPROTECTED = absl_flags.DEFINE_bool(
    'release_unprotected_stats', False, 'fedhdp, dp_fedavg, nonprivate: also '
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
    're-running the same command resumes from the last checkpoint.')
OUTPUT_DIR = absl_flags.DEFINE_string('output_dir', 'results/latest',
                                  'Where files are written.')
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



class InputError(ValueError):
  """Bad flags or data: reported as one line, without a traceback."""


def floats(flag) -> list[float]:
  try:
    return [float(v) for v in flag.value]
  except ValueError:
    raise InputError(
        f'--{flag.name} must be comma-separated numbers, got '
        f'{",".join(flag.value)!r}.') from None


def check(condition: bool, message: str) -> None:
  if not condition:
    raise InputError(message)


def validate_flags() -> None:
  check(ROUNDS.value >= 1, f'--rounds must be >= 1, got {ROUNDS.value}.')
  check(CLIENTS_PER_ROUND.value >= 1,
         f'--clients_per_round must be >= 1, got {CLIENTS_PER_ROUND.value}.')
  check(0.0 <= OPT_OUT.value <= 1.0,
         f'--opt_out_fraction must be in [0, 1], got {OPT_OUT.value}.')
  for r in floats(R):
    check(r >= 0, f'--r must be >= 0, got {r}.')
  for e in floats(EPSILONS):
    check(e > 0, f'--epsilons must be > 0, got {e}.')
  for d in floats(DELTAS):
    check(0 < d < 1, f'--deltas must be in (0, 1), got {d}.')
  check(EVAL_EVERY.value >= 1,
         f'--eval_every must be >= 1, got {EVAL_EVERY.value}.')
  for flag in (DITTO_LAMBDA_P, DITTO_LAMBDA_NP):
    check(flag.value is None or flag.value >= 0,
           f'--{flag.name} must be >= 0, got {flag.value}.')
  check(DITTO_LR.value is None or DITTO_LR.value > 0,
         f'--ditto_lr must be > 0, got {DITTO_LR.value}.')
  check(CHECKPOINT_EVERY.value >= 0,
         f'--checkpoint_every must be >= 0, got {CHECKPOINT_EVERY.value}.')
  check(COHORT_SIZE.value >= 0,
         f'--cohort_size must be >= 0, got {COHORT_SIZE.value}.')
  known = sum((algorithms.names(s) for s in algorithms.SETTINGS), ())
  for a in ALGORITHMS.value:
    check(a in known, f'--algorithms: unknown algorithm {a!r}; choose from '
           f'{", ".join(known)}.')
  kinds = {setting(a) for a in ALGORITHMS.value}
  check(len(kinds) == 1, '--algorithms: trusted-server (fedhdp, dp_fedavg, '
         'nonprivate), untrusted-server and cross-silo algorithms cannot be '
         'mixed in one run.')
  for lam in floats(LAMBDAS):
    check(lam >= 0, f'--lambdas must be >= 0, got {lam}.')
  for lr in floats(CLIENT_LRS) if CLIENT_LRS.value else []:
    check(lr > 0, f'--client_lrs must be > 0, got {lr}.')
  check(DP_SGD_CLIP.value > 0,
         f'--dp_sgd_clip must be > 0, got {DP_SGD_CLIP.value}.')


def setting(algorithm: str) -> str:
  """The setting of a known algorithm (its registry record's)."""
  return algorithms.REGISTRY[algorithm].setting


def private_levels():
  from tff_hdp.privacy.privacy_groups import PrivacyGroup  # pylint: disable=g-import-not-at-top
  eps = floats(EPSILONS)
  deltas = floats(DELTAS)
  if len(deltas) == 1:
    deltas = deltas * len(eps)
  check(len(deltas) == len(eps),
         f'--deltas has {len(deltas)} values for {len(eps)} --epsilons.')
  return [PrivacyGroup(f'private_eps{e:g}', e, d) for e, d in zip(eps, deltas)]


def load_task():
  try:
    return tasks.load(
        TASK.value,
        tasks.TaskOptions(data_dir=DATA_DIR.value,
                          batch_size=BATCH_SIZE.value, seed=SEED.value,
                          num_clients=NUM_CLIENTS.value))
  except ValueError as e:
    raise InputError(f'--task={TASK.value}: {e}') from None


def print_privacy_warnings() -> None:
  """The untrusted and cross-silo runs' header lines (`release_policy`)."""
  from tff_hdp.privacy import release_policy  # pylint: disable=g-import-not-at-top
  for line in release_policy.privacy_warnings(
      seeded=UNSAFE_SEEDED.value, large_delta=UNSAFE_LARGE_DELTA.value):
    print(line)

"""Every bad flag value is one line naming the flag, with exit status 2.

These are the checks that need no data: `cli.entry` runs them before
TensorFlow is imported, so each case costs a fraction of a second. Checks
that need the data or the accountant (a delta above 1/N, an infeasible
target, a malformed data file) are in tests/cli/test_cli.py.
"""

import os
import subprocess
import sys

import pytest

from tests import repository

ROOT = repository.ROOT

# fedhdp_ddp's devices: 20 a round.
_DDP = ['--algorithms=fedhdp_ddp', '--sampling=device', '--min_separation=1',
        '--max_participations=2', '--clients_per_round=20']
# (command line, the flag as the line must name it, a fragment of the line).
CASES = [
    # Numbers that are not numbers, or not finite.
    (['--epsilons=inf'], '--epsilons', 'finite'),
    (['--epsilons='], '--epsilons', 'at least one number'),
    (['--epsilons=abc'], '--epsilons', 'comma-separated numbers'),
    (['--deltas='], '--deltas', 'at least one number'),
    (['--deltas=0'], '--deltas', '(0, 1)'),
    (['--deltas=1.5'], '--deltas', '(0, 1)'),
    (['--epsilons=0'], '--epsilons', '> 0'),
    (['--epsilons=1,1'], '--epsilons/--deltas',
     '(epsilon=1, delta=0.0001) twice'),
    (['--epsilons=1,2', '--deltas=1e-5,1e-5,1e-5'], '--deltas',
     '3 values for 2 --epsilons'),
    (['--r=inf'], '--r', 'finite'),
    (['--r='], '--r', 'at least one number'),
    (['--r=-0.5'], '--r', '[0, 1e+29]'),
    (['--r=1,1.0'], '--r', 'twice'),
    (['--algorithms=dp_fedavg,nonprivate', '--r=0.5'], '--r',
     'read by fedhdp, fedhdp_blt, fedhdp_tree, fedhdp_ddp only'),
    (['--epsilons=1,2', '--level_ratios=0.5'], '--level_ratios',
     '1 values for the 2 private levels'),
    (['--epsilons=1,2', '--level_ratios=0.5,-1'], '--level_ratios',
     '[0, 1e+29]'),
    (['--epsilons=1,2', '--level_ratios='], '--level_ratios',
     'at least one number'),
    (['--epsilons=1,2', '--level_ratios=0.5,1', '--r=0.1'],
     '--level_ratios and --r', 'give one of them'),
    (['--algorithms=dp_fedavg', '--level_ratios=1'], '--level_ratios',
     'read by fedhdp, fedhdp_blt, fedhdp_tree, fedhdp_ddp only'),
    # Every group with clients at ratio 0: the model never moved, exit 0.
    (['--epsilons=1,2,3', '--level_ratios=0,0,0', '--opt_out_fraction=0'],
     '--level_ratios=0,0,0', 'weighs every group that has clients 0'),
    (['--r=0,1', '--opt_out_fraction=0'], '--r=0',
     'weighs every group that has clients 0'),
    (['--heterogeneity=0'], '--heterogeneity', '(0, 1e+29]'),
    (['--algorithms=frontier_sampling', '--tilt=1.5'], '--tilt', '[0, 1]'),
    (['--algorithms=frontier_sampling', '--tilt=nan'], '--tilt', '[0, 1]'),
    (['--algorithms=frontier_sampling', '--sampling=fixed'],
     '--algorithms=frontier_sampling', 'run it with --sampling=poisson'),
    (['--algorithms=fedhdp', '--tilt=0.5'], '--tilt',
     'read by frontier_sampling only'),
    # numpy's overflow warnings and 'ratio r must be >= 0, got nan' before.
    (['--heterogeneity=1e308'], '--heterogeneity', '(0, 1e+29]'),
    (['--heterogeneity=inf'], '--heterogeneity', '(0, 1e+29]'),
    (['--sampling=device', '--max_participations=2'], '--sampling=device',
     'needs --min_separation'),
    (['--sampling=device', '--min_separation=0', '--max_participations=2'],
     '--min_separation', '[1, 2147483647]'),
    (['--max_participations=2'], '--max_participations',
     'only with --sampling=device'),
    # Refused only after TensorFlow loaded, and passed by --dry_run, before.
    (['--algorithms=fedhdp_blt', '--dry_run'], '--algorithms=fedhdp_blt',
     'run it with --sampling=device'),
    (['--algorithms=fedhdp_tree', '--sampling=fixed'],
     '--algorithms=fedhdp_tree', 'run it with --sampling=device'),
    (['--algorithms=fedhdp_ddp'], '--algorithms=fedhdp_ddp',
     'run it with --sampling=device'),
    (['--algorithms=fedhdp_ddp', '--ddp_bits=23'], '--ddp_bits', '22'),
    # TFF's check of the modulus against a round's clients, made before
    # TensorFlow loads (tests/aggregators/test_tff_distributed_dp.py holds
    # it to TFF's own).
    (_DDP + ['--ddp_bits=4'], "--ddp_bits=4:",
     "20 noise shares needs 5 bits"),
    (_DDP + ['--epsilons=1,3', '--ddp_bits=16,4'],
     "--ddp_bits=4 for privacy level 'private_eps3'", 'needs 5 bits'),
    (_DDP + ['--epsilons=1,3', '--ddp_bits=16,16,16'], '--ddp_bits',
     'give one per level, or one for all'),
    (_DDP + ['--ddp_bits=16.5'], '--ddp_bits', 'not a whole number'),
    (_DDP + ['--ddp_mechanism=laplace'], '--ddp_mechanism', 'skellam'),
    (_DDP + ['--ddp_rounding=floor'], '--ddp_rounding', 'unconditional'),
    (_DDP + ['--ddp_slots=one'], '--ddp_slots', 'own_group'),
    (_DDP + ['--simulate_dropout=1'], '--simulate_dropout', '[0, 1)'),
    (['--simulate_dropout=0.1'], '--simulate_dropout',
     'pass --sampling=device'),
    (_DDP + ['--simulate_dropout=0.1', '--canaries=2'],
     '--simulate_dropout with --canaries', 'drop one'),
    (_DDP + ['--ddp_slots=own_group'], '--ddp_slots=own_group',
     '--cohort_size of 2 or more'),
    (['--algorithms=fedhdp', '--ddp_slots=own_group', '--cohort_size=64'],
     '--ddp_slots', 'read by fedhdp_ddp only'),
    (['--algorithms=fedhdp', '--ddp_rounding=unconditional'],
     '--ddp_rounding', 'read by fedhdp_ddp only'),
    (['--algorithms=fedhdp', '--ddp_mechanism=skellam'], '--ddp_mechanism',
     'read by fedhdp_ddp only'),
    (['--heterogeneity=1e308', '--dry_run'], '--heterogeneity',
     '(0, 1e+29]'),
    (['--algorithms=blt_shared', '--sampling=device', '--min_separation=1',
      '--max_participations=2', '--epsilons=1,2',
      '--level_participations=1.5,2', '--dry_run'], '--level_participations',
     '1.5 is not a whole number'),
    (['--algorithms=blt_shared', '--sampling=device', '--min_separation=1',
      '--max_participations=2', '--epsilons=1,2',
      '--level_participations=1,4', '--dry_run'], '--level_participations',
     '4 is not a whole number of participations in [1, '
     '--max_participations=2]'),
    (['--epsilons=1e300', '--rounds=3'], '--epsilons', '(0, 1000]'),
    (['--algorithms=mrmtl', '--epsilons=1e6'], '--epsilons', '(0, 1000]'),
    (['--client_lr=nan'], '--client_lr', '(0, 1e+38]'),
    (['--client_lr=0'], '--client_lr', '(0, 1e+38]'),
    (['--server_lr=0'], '--server_lr', '(0, 1e+38]'),
    (['--server_momentum=1'], '--server_momentum', '[0, 1)'),
    (['--clip_norm=0'], '--clip_norm', '(0, 1e+19]'),
    (['--target_quantile=1.5'], '--target_quantile', '[0, 1]'),
    (['--clip_lr=-0.1'], '--clip_lr', '[0, 88]'),
    (['--clip_count_stddev=-1'], '--clip_count_stddev', '(0, 2147483647]'),
    (['--clip_count_stddev=0'], '--clip_count_stddev',
     'with adaptive clipping, got 0: the clip count it adapts to would be '
     'released without noise; pass --clip_lr=0 to fix the clip norm'),
    (['--opt_out_fraction=1.5'], '--opt_out_fraction', '[0, 1]'),
    (['--opt_out_fraction=1'], '--opt_out_fraction=1',
     'leaves fedhdp no private clients'),
    (['--epsilons=1,2', '--level_fractions=1,0'], '--level_fractions',
     'must be in (0, 1]'),
    (['--ditto_lambda_p=-1'], '--ditto_lambda_p', '[0, 1e+38]'),
    (['--ditto_lr=0'], '--ditto_lr', '(0, 1e+38]'),
    (['--level_fractions=0.5,0.5'], '--level_fractions', '1 --epsilons'),
    (['--epsilons=1,2', '--level_fractions=0.5,0.6'], '--level_fractions',
     'sum to 1'),
    # Counts.
    (['--num_clients=0'], '--num_clients', '[1, 2147483647]'),
    (['--rounds=0'], '--rounds', '[1, 2147483647]'),
    (['--rounds=99999999999999999999'], '--rounds', '[1, 2147483647]'),
    (['--num_clients=3000000000'], '--num_clients', '[1, 2147483647]'),
    (['--clients_per_round=0'], '--clients_per_round', '[1, 2147483647]'),
    (['--batch_size=0'], '--batch_size', '[1, 2147483647]'),
    (['--local_epochs=0'], '--local_epochs', '[1, 2147483647]'),
    (['--eval_every=0'], '--eval_every', '[1, 2147483647]'),
    (['--checkpoint_every=-1'], '--checkpoint_every', '[0, 2147483647]'),
    (['--cohort_size=-2'], '--cohort_size', '[0, 2147483647]'),
    (['--seed=-1'], '--seed', '[0, 2147483647]'),
    (['--rounds=x'], '--rounds', "'x'"),
    # Algorithms and settings.
    (['--algorithms='], '--algorithms', 'at least one'),
    (['--algorithms=fedprox'], '--algorithms', "unknown algorithm 'fedprox'"),
    (['--algorithms=fedhdp,fedhdp'], '--algorithms', 'twice'),
    (['--algorithms=fedhdp,robust_hdp'], '--algorithms', 'cannot be mixed'),
    (['--algorithms=mrmtl,fedhdp'], '--algorithms', 'cannot be mixed'),
    (['--task=cifar'], '--task', 'should be one of'),
    # Flags the run's setting does not read.
    (['--sweep'], '--sweep', 'does not apply to trusted-server runs'),
    (['--lambdas=1'], '--lambdas', 'does not apply to trusted-server runs'),
    (['--num_clusters=3'], '--num_clusters', 'does not apply'),
    (['--epsilon_distribution=uniform'], '--epsilon_distribution',
     'does not apply to trusted-server runs'),
    (['--algorithms=weiavg', '--epsilons=2'], '--epsilons',
     'does not apply to untrusted-server runs'),
    (['--algorithms=weiavg', '--cohort_size=8'], '--cohort_size',
     'does not apply to untrusted-server runs'),
    # Needs the data (and TensorFlow): the task's client count.
    pytest.param(['--algorithms=weiavg', '--num_clients=10',
                  '--epsilon_distribution=dist2'], '--epsilon_distribution',
                 'lists [20, 40, 60] clients', marks=pytest.mark.tf),
    (['--algorithms=mrmtl', '--r=0.5'], '--r',
     'does not apply to cross-silo runs'),
    (['--task=point_estimation', '--algorithms=weiavg'], '--algorithms',
     'does not apply to point-estimation runs'),
    (['--task=point_estimation', '--rounds=5'], '--rounds',
     'does not apply to point-estimation runs'),
    (['--trials=10'], '--trials', 'does not apply to trusted-server runs'),
    (['--data_dir=/tmp'], '--data_dir', 'makes its own data'),
    (['--task=school', '--algorithms=mrmtl', '--num_clients=10'],
     '--num_clients', "silos are its data set's own"),
    # "does not exist", after TensorFlow loaded, before.
    (['--task=mnist_noniid', '--data_dir={file}'], '--data_dir',
     'is a file, not a folder'),
    # Setting-specific values.
    (['--algorithms=mrmtl', '--lambdas=-1'], '--lambdas', '[0, 1e+38]'),
    # The DP-SGD settings' accountant (the trusted setting's is in plan's).
    (['--algorithms=weiavg', '--accountant=moments'], '--accountant',
     'one of <pld|rdp>'),
    (['--algorithms=mrmtl', '--accountant=moments'], '--accountant',
     'one of <pld|rdp>'),
    (['--algorithms=weiavg', '--pld_discretization=0.05'],
     '--pld_discretization', '(0, 0.01]'),
    (['--algorithms=mrmtl', '--pld_discretization=0'],
     '--pld_discretization', '(0, 0.01]'),
    (['--algorithms=mrmtl', '--accountant=rdp', '--pld_discretization=1e-3'],
     '--pld_discretization', 'only with --accountant=pld; drop it'),
    (['--algorithms=mrmtl', '--client_lrs=0'], '--client_lrs', '(0, 1e+38]'),
    (['--algorithms=mrmtl', '--lambdas=0.1,0.1'], '--lambdas', 'twice'),
    (['--algorithms=mrmtl', '--client_lrs=0.1,0.10'], '--client_lrs',
     'twice'),
    (['--algorithms=ifca', '--num_clusters=0'], '--num_clusters', '[1, 2147483647]'),
    (['--algorithms=ifca', '--selection_share=1'], '--selection_share',
     '(0, 1)'),
    (['--algorithms=weiavg', '--dp_sgd_clip=0'], '--dp_sgd_clip',
     '(0, 1e+19]'),
    (['--algorithms=robust_hdp', '--rpca_freeze_after_round=0'],
     '--rpca_freeze_after_round', '[1, 2147483647]'),
    (['--algorithms=weiavg,pfa', '--rpca_freeze_after_round=1'],
     '--rpca_freeze_after_round', 'read by robust_hdp only'),
    (['--rpca_freeze_after_round=1'], '--rpca_freeze_after_round',
     'does not apply to trusted-server runs'),
    (['--algorithms=weiavg', '--deltas=1e-5,1e-6'], '--deltas',
     'one delta for every client'),
    (['--algorithms=mrmtl', '--deltas=1e-5,1e-6'], '--deltas',
     'one delta for every silo'),
    (['--task=point_estimation', '--trials=-5'], '--trials', '[1, 2147483647]'),
    (['--task=point_estimation', '--trials=0'], '--trials', '[1, 2147483647]'),
    (['--task=point_estimation', '--pe_private=30'], '--pe_private',
     '[1, 19]'),
    # Finite in float64 but not where TensorFlow's float32 holds the value,
    # squares it (clip norms), multiplies it by a count (r) or exponentiates
    # it (the clip learning rate): a meaningless model, exit 0, before.
    (['--r=1e308'], '--r', '[0, 1e+29]'),
    (['--r=1e30'], '--r', '[0, 1e+29]'),
    (['--task=point_estimation', '--r=3.5e38'], '--r', '[0, 1e+29]'),
    (['--clip_norm=1e308'], '--clip_norm', '(0, 1e+19]'),
    (['--clip_norm=1e20'], '--clip_norm', '(0, 1e+19]'),
    (['--server_lr=3.5e38'], '--server_lr', '(0, 1e+38]'),
    (['--clip_lr=89'], '--clip_lr', '[0, 88]'),
    (['--ditto_lambda_p=1e308'], '--ditto_lambda_p', '[0, 1e+38]'),
    (['--ditto_lambda_np=1e39'], '--ditto_lambda_np', '[0, 1e+38]'),
    (['--ditto_lambda_p=1', '--ditto_lr=1e39'], '--ditto_lr', '(0, 1e+38]'),
    (['--client_lr=1e308'], '--client_lr', '(0, 1e+38]'),
    (['--client_lr=3.4e38'], '--client_lr', '(0, 1e+38]'),  # TFF refused it
    (['--algorithms=weiavg', '--client_lr=1e20'], '--client_lr', '(0, 1e+19]'),
    (['--algorithms=weiavg', '--dp_sgd_clip=1e308'], '--dp_sgd_clip',
     '(0, 1e+19]'),
    (['--algorithms=mrmtl', '--dp_sgd_clip=1e20'], '--dp_sgd_clip',
     '(0, 1e+19]'),
    (['--algorithms=mrmtl', '--lambdas=0.1,1e308'], '--lambdas', '[0, 1e+38]'),
    (['--algorithms=mrmtl', '--client_lrs=3.5e38'], '--client_lrs',
     '(0, 1e+38]'),
    # A hang (the accountant's search for 2 z_b = inf) and tracebacks before.
    (['--clip_count_stddev=1e308'], '--clip_count_stddev', '(0, 2147483647]'),
    (['--clip_count_stddev=3e9'], '--clip_count_stddev', '(0, 2147483647]'),
    (['--workers=127.0.0.1:8001', '--worker_timeout=1e308'],
     '--worker_timeout', 'must be in (0, '),
    (['--task=point_estimation', '--pe_beta2=1e308'], '--pe_beta2',
     'would reach the norm at which the Monte Carlo\'s aggregator clips'),
    (['--task=point_estimation', '--pe_tau2=1e30'], '--pe_tau2',
     'keep trials x (1 + tau^2 + beta^2 / pe_samples) at most 1e10'),
    (['--task=point_estimation', '--pe_gamma2=1e308'], '--pe_gamma2',
     '[0, 1e+58]'),
    (['--task=point_estimation', '--pe_tau2=0'], '--pe_tau2', '(0, inf)'),
    (['--task=point_estimation', '--pe_beta2=0'], '--pe_beta2', '(0, inf)'),
    (['--task=point_estimation', '--pe_private=20'], '--pe_private',
     '[1, 19]'),
    (['--task=point_estimation', '--trials=2147483647'], '--trials',
     'GiB of memory'),
    # Counts past MAX_COUNT, and below 0, where no check ran.
    (['--canaries=9223372036854775808'], '--canaries', '[0, 2147483647]'),
    (['--algorithms=local', '--cohort_size=-1'], '--cohort_size',
     '[0, 2147483647]'),
    (['--algorithms=mrmtl', '--cohort_size=9223372036854775808'],
     '--cohort_size', '[0, 2147483647]'),
    # Flags that none of the run's algorithms reads.
    (['--algorithms=local', '--regularizer_placement=after_noise'],
     '--regularizer_placement', 'read by mrmtl, ditto, ifca_mrmtl only, none '
     'of which --algorithms=local runs'),
    (['--algorithms=local,fedavg', '--lambdas=1'], '--lambdas',
     'read by mrmtl, ditto, ifca_mrmtl only'),
    (['--algorithms=mrmtl', '--num_clusters=2'], '--num_clusters',
     'read by ifca, ifca_mrmtl only'),
    (['--ditto_lr=0.1'], '--ditto_lr', 'applies only with --ditto_lambda_p'),
    (['--ditto_noise_aware_lambdas', '--ditto_lambda_np=1'],
     '--ditto_noise_aware_lambdas and --ditto_lambda_np', 'give one of them'),
    (['--ditto_noise_aware_lambdas', '--epsilons=1,2',
      '--ditto_level_lambdas=1,2'],
     '--ditto_noise_aware_lambdas and --ditto_level_lambdas',
     'give one of them'),
    (['--ditto_noise_aware_lambdas', '--ditto_local_share=1'],
     '--ditto_local_share', '(0, 1)'),
    (['--ditto_noise_aware_lambdas', '--ditto_local_share=nan'],
     '--ditto_local_share', '(0, 1)'),
    (['--ditto_local_share=0.3'], '--ditto_local_share',
     'only with --ditto_noise_aware_lambdas'),
    # A pull that overshoots the global model further every step.
    (['--ditto_lambda_p=30', '--ditto_lambda_np=1', '--client_lr=0.1'],
     '--ditto_lambda_p=30 with --client_lr=0.1', 'diverges'),
    (['--epsilons=1,2', '--ditto_level_lambdas=1,5', '--ditto_lambda_np=1',
      '--ditto_lr=0.4'], '--ditto_level_lambdas=5 with --ditto_lr=0.4',
     'give lambda < 5'),
    (['--algorithms=mrmtl', '--regularizer_placement=after_noise',
      '--lambdas=1,10', '--client_lrs=0.01,0.3'],
     '--lambdas=10 with --client_lrs=0.3', 'diverges'),
    (['--algorithms=mrmtl', '--regularizer_placement=after_noise',
      '--epsilons=1,10', '--lambdas_by_epsilon=1:30,10:0.1'],
     '--lambdas_by_epsilon=30 with --client_lr=0.1', 'diverges'),
    # Cross-silo: each silo the lambda of its epsilon.
    (['--algorithms=mrmtl', '--epsilons=1,10', '--lambdas_by_epsilon=1:0.5'],
     '--lambdas_by_epsilon', 'no lambda for the silos at epsilon 10'),
    (['--algorithms=mrmtl', '--epsilons=1,10',
      '--lambdas_by_epsilon=1:0.5,10:0.1,3:1'], '--lambdas_by_epsilon',
     'no silo is at epsilon 3'),
    (['--algorithms=mrmtl', '--epsilons=1,10',
      '--lambdas_by_epsilon=1:0.5,10:-1'], '--lambdas_by_epsilon',
     '[0, 1e+38]'),
    (['--algorithms=mrmtl', '--epsilons=1,10',
      '--lambdas_by_epsilon=1:0.5,10:nan'], '--lambdas_by_epsilon',
     '[0, 1e+38]'),
    (['--algorithms=mrmtl', '--epsilons=1,10',
      '--lambdas_by_epsilon=1:0.5,1:0.2,10:1'], '--lambdas_by_epsilon',
     'epsilon 1 twice'),
    (['--algorithms=mrmtl', '--lambdas_by_epsilon=3.6'],
     '--lambdas_by_epsilon', 'write epsilon:lambda pairs'),
    (['--algorithms=mrmtl', '--lambdas_by_epsilon=3.6:1', '--lambdas=1'],
     '--lambdas_by_epsilon and --lambdas', 'give one of them'),
    (['--algorithms=local', '--lambdas_by_epsilon=3.6:1'],
     '--lambdas_by_epsilon', 'read by mrmtl, ditto, ifca_mrmtl only'),
    # Cross-silo: each silo's lambda from its noise.
    (['--algorithms=mrmtl', '--silo_noise_aware_lambdas', '--lambdas=1'],
     '--silo_noise_aware_lambdas and --lambdas', 'give one of them'),
    (['--algorithms=mrmtl', '--epsilons=1,10', '--silo_noise_aware_lambdas',
      '--lambdas_by_epsilon=1:0.5,10:0.1'],
     '--silo_noise_aware_lambdas and --lambdas_by_epsilon',
     'give one of them'),
    (['--algorithms=local', '--silo_noise_aware_lambdas'],
     '--silo_noise_aware_lambdas', 'read by mrmtl, ditto, ifca_mrmtl only'),
    (['--algorithms=mrmtl', '--heterogeneity=0.5'], '--heterogeneity',
     'only with --silo_noise_aware_lambdas'),
    (['--algorithms=mrmtl', '--silo_noise_aware_lambdas',
      '--heterogeneity=0'], '--heterogeneity', '(0, '),
    # Ditto's lambda per private level.
    (['--epsilons=1,3.6,10', '--ditto_level_lambdas=0.1,0.5',
      '--ditto_lambda_np=1'], '--ditto_level_lambdas',
     '2 values for the 3 private levels'),
    (['--epsilons=1,10', '--ditto_level_lambdas=0.1,0.5,1',
      '--ditto_lambda_np=1'], '--ditto_level_lambdas',
     '3 values for the 2 private levels'),
    (['--epsilons=1,10', '--ditto_level_lambdas=0.1,-1',
      '--ditto_lambda_np=1'], '--ditto_level_lambdas', '[0, 1e+38]'),
    (['--epsilons=1,10', '--ditto_level_lambdas=0.1,nan',
      '--ditto_lambda_np=1'], '--ditto_level_lambdas', 'finite'),
    (['--epsilons=1,10', '--ditto_level_lambdas=0.1,inf',
      '--ditto_lambda_np=1'], '--ditto_level_lambdas', 'finite'),
    (['--epsilons=1,10', '--ditto_level_lambdas=0.1,0.5'],
     '--ditto_lambda_np', "give the opt-out group's"),
    (['--epsilons=1,10', '--ditto_level_lambdas=0.1,0.5',
      '--ditto_lambda_np=1', '--ditto_lambda_p=1'],
     '--ditto_level_lambdas and --ditto_lambda_p', 'give one of them'),
    # Output folder and stray words.
    (['--output_dir={file}'], '--output_dir', 'is a file, not a folder'),
    (['--output_dir={file}/below'], '--output_dir', 'is a file, not a folder'),
    (['--output_dir='], '--output_dir', 'must not be empty'),
    (['--task=point_estimation', '--output_dir={file}'], '--output_dir',
     'is a file'),
    # TFF workers.
    (['--workers=localhost'], '--workers', "'localhost' is not host:port"),
    (['--workers=127.0.0.1:0'], '--workers', 'is not host:port'),
    (['--workers=127.0.0.1:8001,127.0.0.1:8001'], '--workers',
     'lists a value twice'),
    (['--worker_timeout=5'], '--worker_timeout', 'only with --workers'),
    (['--workers=127.0.0.1:8001', '--worker_timeout=0'], '--worker_timeout',
     'must be in (0, '),
    (['--task=point_estimation', '--workers=127.0.0.1:8001'], '--workers',
     'does not apply to point-estimation runs'),
    (['--nonsense=1'], 'nonsense', 'Unknown command line flag'),
    (['extra'], 'unexpected arguments', 'extra'),
]


def _process(program, *flags, env=None):
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, program), *flags], cwd=ROOT,
      capture_output=True, text=True, timeout=120, env=env)


def _run(program, *flags, env=None):
  """run_experiment.py and reproduce.py in this test process (what a
  command prints and its status are the claim; a fresh process would add
  about half a second of start-up to each of these cases); other programs,
  and any run given its own environment, in a process of their own.
  `test_a_fresh_process_prints_the_same_one_line` checks that the line is
  the process's whole stderr."""
  if env is None and program in ('run_experiment.py', 'reproduce.py'):
    return repository.run_program(program, *flags)
  return _process(program, *flags, env=env)


def _case_id(case):
  return ' '.join((case.values if hasattr(case, 'values') else case)[0]) or (
      'empty')


@pytest.mark.parametrize('flags,flag,fragment', CASES,
                         ids=[_case_id(c) for c in CASES])
def test_bad_value_is_one_line_naming_the_flag_with_status_2(
    flags, flag, fragment, tmp_path):
  a_file = tmp_path / 'a_file'
  a_file.write_text('')
  flags = [f.replace('{file}', str(a_file)) for f in flags]
  if not any(f.startswith('--output_dir') for f in flags):
    flags.append(f'--output_dir={tmp_path}/out')
  result = _run('run_experiment.py', *flags)
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith('run_experiment.py: error: ')
  assert flag in lines[0] and fragment in lines[0], lines[0]
  # A refused command writes nothing, and leaves no folder it created.
  assert not os.path.exists(tmp_path / 'out')


@pytest.mark.parametrize('case', [0, len(CASES) // 2, len(CASES) - 1])
def test_a_fresh_process_prints_the_same_one_line(case, tmp_path):
  """The cases above run in the test process; a few again as the command a
  user types, whose stderr must be that one line and nothing else."""
  flags, _, _ = CASES[case].values if hasattr(CASES[case], 'values') else (
      CASES[case])
  a_file = tmp_path / 'a_file'  # as the cases above have it
  a_file.write_text('')
  flags = [f.replace('{file}', str(a_file)) for f in flags]
  if not any(f.startswith('--output_dir') for f in flags):
    flags.append(f'--output_dir={tmp_path}/out')
  here = _run('run_experiment.py', *flags)
  fresh = _process('run_experiment.py', *flags)
  assert fresh.returncode == here.returncode == 2
  assert fresh.stderr.strip().splitlines() == here.stderr.strip().splitlines()
  assert len(fresh.stderr.strip().splitlines()) == 1


def test_the_table_has_forty_cases_or_more():
  assert len(CASES) >= 40


@pytest.mark.parametrize('flags,flag,fragment', [
    (['--presets=nope'], '--presets', "unknown preset 'nope'"),
    (['--presets=digits', '--sweep'], '--sweep',
     'does not apply to trusted-server runs'),
    (['--presets=digits', '--r=inf'], '--r', 'finite'),
    (['--presets=digits', '--output_dir={file}'], '--output_dir', 'is a file'),
    (['--presets=digits', '--task=point_estimation'], '--task',
     'runs each preset on its own task (digits: digits)'),
    (['--presets=digits', '--task=school', '--rounds=2', '--ditto_lambdas='],
     '--task', 'runs each preset on its own task'),
    (['--presets=digits', '--algorithms=mrmtl', '--r=1'], '--algorithms',
     "trusted-server algorithms (fedhdp, fedhdp_blt, fedhdp_tree, "
     "fedhdp_ddp, blt_shared, individualized_sampling, frontier_sampling, "
     "dp_fedavg, "
     "nonprivate), not "
     "'mrmtl'"),
    (['--presets=digits', '--algorithms=dp_fedavg', '--r=0.5'], '--r',
     'read by fedhdp, fedhdp_blt, fedhdp_tree, fedhdp_ddp only'),
    (['--presets=digits,digits'], '--presets', 'twice'),
    (['--presets=paper,femnist'], '--presets', 'twice'),
    (['--presets=digits', '--ditto_lambdas=0.1,0.10'], '--ditto_lambdas',
     'twice'),
    (['--presets=digits', '--epsilons=1e300'], '--epsilons', '(0, 1000]'),
    # A flag the preset's setting does not read is checked with the preset.
    (['--presets=digits', '--data_dir=/tmp'], '--data_dir',
     'makes its own data'),
])
def test_reproduce_checks_the_same_way(flags, flag, fragment, tmp_path):
  a_file = tmp_path / 'a_file'
  a_file.write_text('')
  flags = [f.replace('{file}', str(a_file)) for f in flags]
  if not any(f.startswith('--output_dir') for f in flags):
    flags.append(f'--output_dir={tmp_path}/out')
  result = _run('reproduce.py', *flags)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('reproduce.py: error: ')
  assert flag in lines[0] and fragment in lines[0], lines[0]
  assert not os.path.exists(tmp_path / 'out')  # checked before any folder


def test_reproduce_help_states_its_output_folder():
  result = _process('reproduce.py', '--help')
  assert result.returncode == 0
  assert 'results/latest' not in result.stdout
  assert 'results/reproduce-<8 hex digits>' in result.stdout
  assert '--dry_run' in result.stdout


@pytest.mark.parametrize('flags,fragment', [
    ([], '--listen is required'),
    (['--listen=8001'], "--listen: '8001' is not host:port"),
    (['--listen=myhost:8001'], 'write an IP address and a port'),
    (['--listen=0.0.0.0:8001'], 'a wildcard answers every network'),
    (['--listen=[::]:8001'], 'a wildcard answers every network'),
])
def test_run_worker_refuses_a_bad_address(flags, fragment):
  result = _run('run_worker.py', *flags)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('run_worker.py: error: ')
  assert fragment in lines[0], lines[0]


@pytest.mark.parametrize('program', ['run_experiment.py', 'reproduce.py'])
def test_help_exits_0_grouped_by_setting_without_tensorflow_flags(program):
  result = _process(program, '--help')  # before TensorFlow: a process's
  assert result.returncode == 0, result.stderr
  assert 'Trusted server, client-level DP' in result.stdout
  assert '--clip_count_stddev' in result.stdout
  # absl's --helpfull lists TensorFlow's own flags once TF is imported; the
  # help is printed before it is.
  assert '--tt_check_filter' not in result.stdout
  assert '--xla' not in result.stdout
  if program == 'run_experiment.py':
    for title in ('Every run:', 'Untrusted server', 'Cross-silo',
                  'Point estimation'):
      assert title in result.stdout


BENCHMARKS = sorted(
    name for name in os.listdir(os.path.join(ROOT, 'benchmarks'))
    if name.endswith('.py') and 'entry.run(' in open(
        os.path.join(ROOT, 'benchmarks', name)).read())


# Every benchmark parses its flags before it imports TensorFlow (the fast
# tier, which cannot import TensorFlow, checks it).
@pytest.mark.parametrize('script', BENCHMARKS)
def test_benchmark_scripts_answer_help_and_refuse_unknown_flags(script):
  program = os.path.join('benchmarks', script)
  result = _run(program, '--help')
  assert result.returncode == 0, result.stderr[-2000:]
  result = _run(program, '--no_such_flag=1')
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip().splitlines() == [
      f"{script}: error: Unknown command line flag 'no_such_flag' (see "
      '--help)']


@pytest.mark.parametrize('script', ['run_experiment.py', 'reproduce.py',
                                    'run_worker.py', 'plan.py'])
def test_a_python_without_the_stack_is_one_line_naming_the_install(script):
  """`python3 run_experiment.py` with a Python that lacks the pinned stack
  (here the same one with its site-packages left out, -S)."""
  # Without the test tiers' PYTHONPATH (the fast tier's TensorFlow
  # stand-in would count as installed).
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
  result = subprocess.run([sys.executable, '-S', script, '--help'],
                          cwd=repository.ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      f'{script}: error: absl, numpy, tensorflow, tensorflow_federated, '
      f'tensorflow_privacy, dp_accounting are not installed for '
      f'{sys.executable}: run `make install` and use .venv/bin/python '
      '(README, "Two commands"), or install the pinned stack into this '
      'Python (README, "Your own environment").']


@pytest.mark.tf
def test_bits_no_noise_makes_enough_are_refused_before_the_folder_is_claimed(
    tmp_path):
  """8 bits for eps 1: rounding inflates the sensitivity as fast as the
  noise grows, found when the run is planned (after the task loads, before
  its folder is claimed). One line naming --ddp_bits and the level,
  nothing trained, and no folder left (no run key, no seed file)."""
  result = _run('run_experiment.py', *_DDP, '--rounds=2', '--clip_lr=0', '--epsilons=1', '--ddp_bits=8',
                f'--output_dir={tmp_path}/out')
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("run_experiment.py: error: --ddp_bits=8 for "
                             "privacy level 'private_eps1': ")
  assert 'no noise multiplier meets its target' in lines[0], lines[0]
  assert not os.path.exists(tmp_path / 'out')


def test_fedhdp_ddp_takes_cohort_size():
  """Every device of a cohort adds its own noise share
  (`CohortDistributedGroupDPFactory`), so --cohort_size passes its
  checks with fedhdp_ddp."""
  result = _run('run_experiment.py', *_DDP, '--clip_lr=0',
                '--cohort_size=64', '--dry_run')
  assert result.returncode == 0, result.stderr[-2000:]
  assert '--dry_run: ' in result.stdout

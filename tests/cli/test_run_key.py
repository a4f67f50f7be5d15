"""A re-run into the same folder with any result-changing flag changed is
refused or starts fresh: it never reports the old run's numbers.

A resumable run (trusted server, untrusted server, cross-silo) is found
again by its folder (named by its configuration) and its run key (`run_key`
of its setting, stored beside its checkpoint; a finished run's summary is
reused only when the key matches). Every flag of run_experiment.py and
reproduce.py that those settings read is listed here: either with another
value, which must change the folder or the key when set through the command
line's own code, or with the reason it does not change a configuration's
results. A new flag fails `test_every_flag_is_classified` until it is
listed. Point estimation has no rounds and keeps no checkpoint.
"""

from absl import flags as absl_flags
from absl.testing import flagsaver
import pytest

from tff_hdp.cli import cross_silo as cli_cross_silo
from tff_hdp.cli import flags
from tff_hdp.cli import trusted as cli_trusted
from tff_hdp.cli import untrusted as cli_untrusted
# Imported here, not in a test: a flag defined inside the module's
# flagsaver would be deleted when it ends, while the module stayed imported
# (reproduce.py run later in this process would not know its own flags).
from tff_hdp.cli import reproduce
from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import cross_silo_setting
from tff_hdp.simulation import trusted_setting
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf

FLAGS = absl_flags.FLAGS

# (flag, flags the change needs beside it, another value).
SHARED_CHANGES = [
    ('task', [], 'linear_regression'),
    ('seed', [], '5'),
    ('unsafe_seeded_dp_randomness', [], 'true'),
    ('num_clients', [], '50'),
    ('rounds', [], '7'),
    ('batch_size', [], '5'),
    ('client_lr', [], '0.05'),
    ('eval_every', [], '5'),
    ('deltas', [], '1e-5'),
    ('unsafe_allow_large_delta', [], 'true'),
]
# Devices that enforce their own participation (--sampling=device).
_DEVICE = ['--sampling=device', '--min_separation=1',
           '--max_participations=2']
TRUSTED_CHANGES = SHARED_CHANGES + [
    ('epsilons', [], '2'),
    ('algorithms', [], 'dp_fedavg'),
    ('r', [], '0.5'),
    ('level_ratios', ['--algorithms=fedhdp', '--epsilons=1,3'], '0.5,1'),
    ('heterogeneity', ['--algorithms=fedhdp'], '0.5'),
    ('tilt', ['--algorithms=frontier_sampling'], '0.5'),
    # The noise-aware Ditto lambdas read it with any algorithm.
    ('heterogeneity', ['--algorithms=dp_fedavg',
                       '--ditto_noise_aware_lambdas'], '0.5'),
    ('level_fractions', ['--epsilons=1,3'], '0.3,0.7'),
    ('opt_out_fraction', [], '0.1'),
    ('levels_by_label', ['--epsilons=1,8'], '0-3:1,4-9:8'),
    ('clients_per_round', [], '5'),
    ('sampling', [], 'fixed'),
    ('accountant', [], 'rdp'),
    ('pld_discretization', [], '0.0005'),
    ('min_separation', _DEVICE, '2'),
    ('max_participations', _DEVICE, '3'),
    ('level_participations', _DEVICE + ['--algorithms=blt_shared',
                                        '--clip_lr=0', '--epsilons=1,3'],
     '1,2'),
    ('ddp_bits', _DEVICE + ['--algorithms=fedhdp_ddp', '--clip_lr=0'], '18'),
    ('ddp_bits', _DEVICE + ['--algorithms=fedhdp_ddp', '--clip_lr=0',
                            '--epsilons=1,3'], '16,18'),
    ('ddp_mechanism', _DEVICE + ['--algorithms=fedhdp_ddp', '--clip_lr=0'],
     'skellam'),
    ('ddp_rounding', _DEVICE + ['--algorithms=fedhdp_ddp', '--clip_lr=0'],
     'unconditional'),
    ('ddp_slots', _DEVICE + ['--algorithms=fedhdp_ddp', '--clip_lr=0',
                             '--cohort_size=4'], 'own_group'),
    ('local_epochs', [], '2'),
    ('simulate_dropout', _DEVICE, '0.1'),
    ('cohort_size', [], '4'),
    ('canaries', [], '3'),
    ('server_lr', [], '0.5'),
    ('server_momentum', [], '0.9'),
    ('clip_norm', [], '0.3'),
    ('target_quantile', [], '0.7'),
    ('clip_lr', [], '0.1'),
    ('clip_count_stddev', [], '3'),
    ('denominator', [], 'realized'),
    ('ditto_lambda_p', [], '0.1'),
    ('ditto_lambda_np', [], '0.1'),
    ('ditto_lr', ['--ditto_lambda_p=0.1'], '0.05'),
    ('ditto_noise_aware_lambdas', [], 'true'),
    ('ditto_local_share', ['--ditto_noise_aware_lambdas'], '0.3'),
    ('ditto_level_lambdas', ['--ditto_lambda_np=0.1', '--epsilons=1,3'],
     '0.1,0.5'),
    ('release_unprotected_stats', [], 'true'),
]
UNTRUSTED_CHANGES = SHARED_CHANGES + [
    ('algorithms', [], 'dpfedavg'),
    ('dp_sgd_clip', [], '0.5'),
    ('epsilon_distribution', [], 'uniform'),
    ('rpca_freeze_after_round', ['--algorithms=robust_hdp'], '1'),
    ('release_unprotected_stats', [], 'true'),
    ('canaries', [], '3'),
    ('accountant', [], 'rdp'),
    ('pld_discretization', [], '0.0005'),
]
CROSS_SILO_CHANGES = SHARED_CHANGES + [
    ('epsilons', [], '2'),
    ('algorithms', [], 'ditto'),
    ('dp_sgd_clip', [], '0.5'),
    ('lambdas', [], '0.2'),
    ('lambdas_by_epsilon', ['--epsilons=1,3'], '1:0.2,3:0.5'),
    ('silo_noise_aware_lambdas', [], 'true'),
    ('heterogeneity', ['--silo_noise_aware_lambdas'], '0.5'),
    ('client_lrs', [], '0.05'),
    ('cohort_size', [], '4'),
    ('num_clusters', ['--algorithms=ifca'], '2'),
    ('selection_fraction', ['--algorithms=ifca'], '0.2'),
    ('selection_share', ['--algorithms=ifca'], '0.05'),
    ('regularizer_placement', ['--algorithms=mrmtl'], 'after_noise'),
    ('canaries', [], '3'),
    ('accountant', [], 'rdp'),
    ('pld_discretization', [], '0.0005'),
]
NOT_IN_KEY = {
    'tensorboard': 'writes the released rows again as TensorBoard events',
    'plots': 'draws figures of finished runs',
    'output_dir': 'the folder the run is found in: another folder is another '
                  'run',
    'checkpoint_every': 'how often the state is saved: a resumed run equals '
                        'an uninterrupted one (tests/simulation/test_resume.py)',
    'data_dir': 'what it points to is in the key: the data '
                '(test_the_data_changes_the_key)',
    'client_data': 'what it names is in the key: the SHA-256 of the file '
                   '(tests/tasks/test_client_data.py)',
    'privacy_levels_file': 'what it names is in the key: every client\'s '
                           'group (run_key\'s choices)',
    'workers': 'where the rounds run; the worker count is in the key '
               '(tests/simulation/test_remote_workers.py::'
               'test_another_worker_count_is_another_run)',
    'worker_timeout': 'how long a silent worker is waited for',
    'worker_data': 'where the workers read the same clients: a stored task '
                   'keeps the data digest and trains bit for bit as in '
                   'memory (tests/tasks/test_stored_task.py)',
    'dry_run': 'checks the flags and trains nothing',
    'sweep': 'chooses the grid; each point is its own folder, named by its '
             'lambda and learning rate (the --lambdas, --client_lrs cases)',
}
REPRODUCE_NOT_IN_KEY = {
    'presets': 'each preset is its own folder',
    'ditto_lambdas': 'each Ditto block is its own folder, named by its '
                     'lambdas (the key holds them too)',
    'distributions': 'picks which of a figure\'s runs to train, each in a '
                     'folder of its own',
}


@pytest.fixture(autouse=True, scope='module')
def _parsed_flags():
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py'])
    yield


# --dry_run: the flag checks create no results/<task>-<hash> folder in the
# checkout (the output folder is not part of a run's identity).
def _trusted_identity(args):
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py', '--dry_run', *args])
    flags.validate_flags()
    task = flags.load_task()
    settings, choices, configs = cli_trusted.learning_setup(task)
    config = configs[0]
    return config.name, trusted_setting.run_key(task, config, choices,
                                                settings)


def _cross_silo_identity(args):
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py', '--dry_run', *args])
    flags.validate_flags()
    task = flags.load_task()
    settings, _, _ = cli_cross_silo.learning_setup()
    algorithm = cross_silo_setting.algorithm_record(flags.ALGORITHMS.value[0])
    return (cross_silo_setting.configuration_name(algorithm, settings),
            cross_silo_setting.run_key(task, algorithm, settings))


def _untrusted_identity(args):
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py', '--dry_run', '--algorithms=weiavg', *args])
    flags.validate_flags()
    task = flags.load_task()
    algorithm = flags.ALGORITHMS.value[0]
    return algorithm, untrusted_setting.run_key(
        task, algorithm, cli_untrusted.learning_setup())


def _reads(setting):
  return {name for name, settings in flags.APPLIES.items()
          if setting in settings}


def test_every_flag_is_classified():
  for setting, changes in ((flags.TRUSTED, TRUSTED_CHANGES),
                           (flags.UNTRUSTED, UNTRUSTED_CHANGES),
                           (flags.CROSS_SILO, CROSS_SILO_CHANGES)):
    listed = {name for name, _, _ in changes}
    assert not listed & set(NOT_IN_KEY)
    unclassified = _reads(setting) - listed - set(NOT_IN_KEY)
    assert not unclassified, f'{setting}: classify {sorted(unclassified)}'
    assert listed <= _reads(setting), listed - _reads(setting)
  own = {name for name, value in vars(reproduce).items()
         if isinstance(value, absl_flags.FlagHolder)}
  assert {getattr(reproduce, name).name for name in own} == set(
      REPRODUCE_NOT_IN_KEY)


@pytest.mark.parametrize('flag,base,value', TRUSTED_CHANGES,
                         ids=[c[0] for c in TRUSTED_CHANGES])
def test_trusted_flag_changes_the_run(flag, base, value):
  before = _trusted_identity(base)
  after = _trusted_identity(base + [f'--{flag}={value}'])
  assert before != after, f'--{flag}={value} would resume the old run'


@pytest.mark.parametrize('flag,base,value', UNTRUSTED_CHANGES,
                         ids=[c[0] for c in UNTRUSTED_CHANGES])
def test_untrusted_flag_changes_the_run(flag, base, value):
  before = _untrusted_identity(base)
  after = _untrusted_identity(base + [f'--{flag}={value}'])
  assert before != after, f'--{flag}={value} would resume the old run'


@pytest.mark.parametrize('flag,base,value', CROSS_SILO_CHANGES,
                         ids=[c[0] for c in CROSS_SILO_CHANGES])
def test_cross_silo_flag_changes_the_run(flag, base, value):
  base = ['--algorithms=mrmtl'] + base
  before = _cross_silo_identity(base)
  after = _cross_silo_identity(base + [f'--{flag}={value}'])
  assert before != after, f'--{flag}={value} would resume the old run'


def test_the_same_flags_give_the_same_run():
  # The identity is not a fresh random value each time (which would make
  # every re-run start over and the tests above pass trivially).
  assert _trusted_identity([]) == _trusted_identity([])
  assert (_cross_silo_identity(['--algorithms=mrmtl']) ==
          _cross_silo_identity(['--algorithms=mrmtl']))
  assert _untrusted_identity([]) == _untrusted_identity([])
  assert (_trusted_identity(['--checkpoint_every=3']) ==
          _trusted_identity([]))
  assert (_untrusted_identity(['--checkpoint_every=3']) ==
          _untrusted_identity([]))


def test_the_data_changes_the_key():
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py'])
    task = flags.load_task()
    settings, choices, configs = cli_trusted.learning_setup(task)
  key = trusted_setting.run_key(task, configs[0], choices, settings)
  first = task.client_ids[0]
  x, y = task.client_train[first]
  x = x.copy()
  x.flat[0] += 0.5
  task.client_train[first] = (x, y)
  del task.data_digest  # the cached digest of the data before the change
  changed = trusted_setting.run_key(task, configs[0], choices, settings)
  assert {k for k in key if key[k] != changed[k]} == {'data'}


class _Stop(Exception):
  pass


def test_untrusted_runs_keep_their_key_without_checkpoints(monkeypatch,
                                                          tmp_path):
  # --checkpoint_every=0 saves no round, but the key (and the secret) are
  # written before round 1, so another run into the folder is refused.
  given = {}

  def run_rounds(program, **kwargs):
    given.update(kwargs)
    raise _Stop

  monkeypatch.setattr(untrusted_setting.round_loop, 'run_rounds', run_rounds)
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py', '--num_clients=10'])
    task = flags.load_task()
  settings = untrusted_setting.UntrustedSettings(rounds=1, checkpoint_every=0)
  with pytest.raises(_Stop):
    untrusted_setting.run_algorithm(task, 'weiavg', settings,
                                    output_dir=str(tmp_path), progress=False)
  assert given['checkpoint_every'] == 0
  checkpoint = given['checkpoint']
  assert checkpoint.directory == str(tmp_path / 'weiavg' / 'checkpoints')
  assert sorted(p.name for p in tmp_path.joinpath(
      'weiavg', 'checkpoints').iterdir()) == ['dp_secret_seed', 'run_key.json']
  assert checkpoint.check_key()
  other = untrusted_setting.UntrustedSettings(rounds=2)
  with pytest.raises(checkpointing.CheckpointError, match='differs in: rounds'):
    untrusted_setting.run_algorithm(task, 'weiavg', other,
                                    output_dir=str(tmp_path), progress=False)


def test_a_cohort_too_large_for_the_model_is_lowered_and_said(monkeypatch,
                                                              capsys):
  # Room for 3 clients' copies of the digits model; the run says what it did.
  from tff_hdp.learning import execution  # pylint: disable=g-import-not-at-top
  with flagsaver.flagsaver():
    FLAGS(['run_experiment.py', '--cohort_size=16'])
    task = flags.load_task()
    per_client = 40 * task.keras_model_fn().count_params()
    monkeypatch.setattr(execution, 'COHORT_BYTES', 3 * per_client + 1)
    settings, _, _ = cli_trusted.learning_setup(task)
  assert settings.cohort_size == 3
  assert '--cohort_size=16 lowered to 3' in capsys.readouterr().out

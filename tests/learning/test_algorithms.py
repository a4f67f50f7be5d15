"""The registry refuses an incomplete or unknown record at `register` (or
when the record is made), with one line naming the algorithm and what is
missing; it never falls back to another algorithm."""

import pytest

from tff_hdp.learning import algorithms
from tff_hdp.privacy.release_policy import Measurement


def _build(context):
  raise AssertionError('never built here')


def _one_line(error):
  message = str(error.value)
  assert '\n' not in message, message
  return message


@pytest.fixture
def registry(monkeypatch):
  """The registry, restored after the test."""
  monkeypatch.setattr(algorithms, 'REGISTRY', dict(algorithms.REGISTRY))
  return algorithms


@pytest.mark.parametrize('fields,why', [
    (dict(setting=algorithms.TRUSTED),
     'trusted and untrusted algorithms, and only they, name a factory'),
    (dict(setting=algorithms.UNTRUSTED),
     'trusted and untrusted algorithms, and only they, name a factory'),
    (dict(setting=algorithms.CROSS_SILO, build_factory=_build),
     'a cross-silo algorithm is built from its fields, not a factory'),
    (dict(setting='server'), "unknown setting 'server'"),
    (dict(setting=algorithms.TRUSTED, build_factory=_build, sweep='r'),
     "sweep='r' must name its one swept option"),
    (dict(setting=algorithms.TRUSTED, build_factory=_build,
          options=(algorithms.RATIO,)),
     'sweep=None must name its one swept option'),
    (dict(setting=algorithms.UNTRUSTED, build_factory=_build,
          fixed_clip=True),
     'sweep, fixed_clip, groups and privacy_plan are trusted-setting fields'),
    (dict(setting=algorithms.TRUSTED, build_factory=_build,
          client_weight='epsilon'),
     'client_weight and min_epsilon are untrusted-setting fields'),
    (dict(setting=algorithms.TRUSTED, build_factory=_build,
          regularized=True),
     'are cross-silo fields'),
    (dict(setting=algorithms.UNTRUSTED, build_factory=_build,
          measurements=(Measurement('m', 'm_{group}', per_group=True),)),
     'its measurements are per run, not per group, and covered'),
    (dict(setting=algorithms.TRUSTED, build_factory=_build,
          measurements=('clip_norm',)),
     'its measurements must be release_policy.Measurement records'),
    (dict(setting=algorithms.TRUSTED, build_factory=_build,
          options=('r',)),
     'its options must be algorithms.Option records'),
])
def test_an_incomplete_record_is_refused_in_one_line(fields, why):
  with pytest.raises(ValueError) as error:
    algorithms.Algorithm('mine', paper_name='mine', **fields)
  message = _one_line(error)
  assert message.startswith("algorithm 'mine': "), message
  assert why in message


@pytest.mark.parametrize('name', ['', 'my rule', 'a/b', '--x'])
def test_a_name_that_is_no_flag_value_or_folder_is_refused(name):
  with pytest.raises(ValueError, match='letters, digits and underscores'):
    algorithms.Algorithm(name, algorithms.TRUSTED, 'x', _build)


def test_register_takes_only_records(registry):
  with pytest.raises(TypeError) as error:
    registry.register({'name': 'mine', 'setting': 'trusted'})
  assert _one_line(error) == ('register takes an algorithms.Algorithm '
                              'record, got dict.')
  assert 'mine' not in registry.REGISTRY


def test_a_taken_name_is_refused_and_the_original_kept(registry):
  fedhdp = registry.REGISTRY['fedhdp']
  with pytest.raises(ValueError) as error:
    registry.register(algorithms.Algorithm(
        'fedhdp', algorithms.TRUSTED, 'mine', _build))
  assert _one_line(error) == "an algorithm named 'fedhdp' exists."
  assert registry.REGISTRY['fedhdp'] is fedhdp


def test_an_option_declared_otherwise_than_its_namesake_is_refused(registry):
  other_r = algorithms.Option('r', 'mine', default=2.0, sweep=True,
                              label='r')
  with pytest.raises(ValueError) as error:
    registry.register(algorithms.Algorithm(
        'mine', algorithms.TRUSTED, 'mine', _build, (other_r,), sweep='r'))
  assert "option 'r' is declared otherwise" in _one_line(error)
  assert 'mine' not in registry.REGISTRY
  # The same declaration is shared, as fedhdp's --r would be.
  registry.register(algorithms.Algorithm(
      'mine', algorithms.TRUSTED, 'mine', _build, (algorithms.RATIO,),
      sweep='r'))
  assert registry.readers(algorithms.TRUSTED, 'r') == (
      'fedhdp', 'fedhdp_blt', 'fedhdp_tree', 'fedhdp_ddp', 'mine')


def test_an_unknown_name_is_refused_naming_the_choices(registry):
  assert registry.find('robust_hdp', algorithms.TRUSTED) is None
  with pytest.raises(ValueError) as error:
    registry.record('groupwise', algorithms.TRUSTED)
  assert _one_line(error) == (
      "unknown trusted-server algorithm 'groupwise'; choose one of fedhdp, "
      'fedhdp_blt, fedhdp_tree, fedhdp_ddp, blt_shared, '
      'individualized_sampling, frontier_sampling, dp_fedavg, '
      'nonprivate.')


def test_a_registered_record_is_found_in_its_setting_only(registry):
  mine = algorithms.Algorithm('mine', algorithms.TRUSTED, 'mine', _build)
  registry.register(mine)
  assert registry.record('mine', algorithms.TRUSTED) is mine
  assert registry.names(algorithms.TRUSTED)[-1] == 'mine'
  assert registry.find('mine', algorithms.UNTRUSTED) is None


def test_an_option_named_like_a_flag_of_the_command_line_is_refused(
    registry):
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.cli import flags
  registry.register(algorithms.Algorithm(
      'mine', algorithms.UNTRUSTED, 'mine', _build,
      (algorithms.Option('rounds', 'mine'),)))
  with pytest.raises(ValueError) as error:
    flags.define_algorithm_options()
  assert _one_line(error) == (
      "option 'rounds' of mine: --rounds is a flag of the command line "
      'already; give the option another name.')

"""A record's declared measurements against what its factory reports.

A measurement the run reads but the factory does not report is refused when
the process is built, naming the record and the measurement, before any
round trains or any row is written; a withheld one (its columns not
released) is not required.
"""

import dataclasses
import glob

import pytest

from tff_hdp.tasks import digits
from tff_hdp.learning import algorithms
from tff_hdp.privacy import accounting
from tff_hdp.privacy import plans
from tff_hdp.privacy import privacy_groups as pg
from tff_hdp.privacy import release_policy
from tff_hdp.privacy.release_policy import Measurement
from tff_hdp.simulation import trusted_setting
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf


@pytest.fixture(scope='module')
def task():
  return digits.load(clients_per_digit=2, seed=0)


def _with_bogus(monkeypatch, name, setting, base, **declared):
  record = algorithms.record(base, setting)
  record = dataclasses.replace(
      record, name=name,
      measurements=record.measurements + (Measurement('bogus', 'bogus',
                                                      **declared),))
  monkeypatch.setitem(algorithms.REGISTRY, name, record)


def _trusted(task, out, name):
  settings = trusted_setting.Settings(
      sampling=accounting.PoissonSampling(0.5),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0), **_ONE_ROUND)
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-3)], 0.2, seed=0)
  return trusted_setting.run_configuration(
      task, trusted_setting.Configuration(name, 0.5), choices, settings, out,
      progress=False)


def _untrusted(task, out, name):
  settings = untrusted_setting.UntrustedSettings(
      epsilon_distribution='uniform', **_ONE_ROUND)
  return untrusted_setting.run_algorithm(task, name, settings, out,
                                         progress=False)


_ONE_ROUND = {'rounds': 1, 'checkpoint_every': 0}


@pytest.mark.parametrize('setting,base,run,reported', [
    (algorithms.TRUSTED, 'fedhdp', _trusted, 'clip_norm'),
    (algorithms.UNTRUSTED, 'pfa', _untrusted, 'public, num_public')])
def test_a_record_declaring_an_unreported_measurement_is_refused(
    task, tmp_path, monkeypatch, setting, base, run, reported):
  name = f'bogus_{base}'
  _with_bogus(monkeypatch, name, setting, base)
  with pytest.raises(ValueError, match=(
      rf"algorithm '{name}': its record declares measurement\(s\) 'bogus' "
      rf'that its factory does not report \(it reports: {reported}')):
    run(task, str(tmp_path), name)
  assert not glob.glob(str(tmp_path / '*' / 'rounds.csv'))


def test_a_withheld_measurement_is_not_required(task, tmp_path, monkeypatch):
  _with_bogus(monkeypatch, 'bogus_fedhdp', algorithms.TRUSTED, 'fedhdp',
              covered=release_policy.NOT_COVERED)
  summary, _ = _trusted(task, str(tmp_path), 'bogus_fedhdp')
  assert summary['metrics']['acc_g'] is not None

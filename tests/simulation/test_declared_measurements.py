"""A record's declared measurements against what its factory reports.

A measurement the run reads but the factory does not report is refused when
the process is built, naming the record and the measurement, before any
round trains or any row is written; a withheld one (its columns not
released) is not required.
"""

import dataclasses
import os

import pytest

from tasks import digits
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
  choices = trusted_setting.client_choices(
      task, [pg.PrivacyGroup('p', 8.0, 1e-3)], 0.2, seed=0)
  settings = trusted_setting.Settings(
      rounds=1, sampling=accounting.PoissonSampling(0.5),
      clip=plans.ClipSettings(initial_norm=0.5, count_stddev=5.0),
      eval_every=1, checkpoint_every=0)
  return trusted_setting.run_configuration(
      task, trusted_setting.Configuration(name, 0.5), choices, settings, out,
      progress=False)


def test_a_trusted_record_declaring_an_unreported_measurement_is_refused(
    task, tmp_path, monkeypatch):
  _with_bogus(monkeypatch, 'bogus_fedhdp', algorithms.TRUSTED, 'fedhdp')
  with pytest.raises(ValueError, match=(
      r"algorithm 'bogus_fedhdp': its record declares measurement\(s\) "
      r"'bogus' that its factory does not report \(it reports: clip_norm")):
    _trusted(task, str(tmp_path), 'bogus_fedhdp')
  assert not os.path.exists(tmp_path / 'bogus_fedhdp_r0.5' / 'rounds.csv')


def test_a_withheld_measurement_is_not_required(task, tmp_path, monkeypatch):
  _with_bogus(monkeypatch, 'bogus_fedhdp', algorithms.TRUSTED, 'fedhdp',
              covered=release_policy.NOT_COVERED)
  summary, _ = _trusted(task, str(tmp_path), 'bogus_fedhdp')
  assert summary['metrics']['acc_g'] is not None


def test_an_untrusted_record_declaring_an_unreported_measurement_is_refused(
    task, tmp_path, monkeypatch):
  _with_bogus(monkeypatch, 'bogus_pfa', algorithms.UNTRUSTED, 'pfa')
  with pytest.raises(ValueError, match=(
      r"algorithm 'bogus_pfa': its record declares measurement\(s\) 'bogus' "
      r'that its factory does not report \(it reports: public, num_public')):
    untrusted_setting.run_algorithm(
        task, 'bogus_pfa', untrusted_setting.UntrustedSettings(
            rounds=1, epsilon_distribution='uniform', checkpoint_every=0),
        str(tmp_path), progress=False)
  assert not os.path.exists(tmp_path / 'bogus_pfa' / 'rounds.csv')

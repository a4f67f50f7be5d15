"""Audit statistics against closed forms and an independent AUC."""

import math

import numpy as np
import pytest
from sklearn import metrics

from tff_hdp.privacy import privacy_audit


def test_clopper_pearson_closed_forms():
  # With 0 (or all) successes the exact bounds have closed forms.
  lo, hi = privacy_audit.clopper_pearson(0, 10, 0.05)
  assert lo == 0.0 and hi == pytest.approx(1 - 0.025**(1 / 10), rel=1e-9)
  lo, hi = privacy_audit.clopper_pearson(20, 20, 0.05)
  assert hi == 1.0 and lo == pytest.approx(0.025**(1 / 20), rel=1e-9)


def test_auc_matches_sklearn():
  rng = np.random.default_rng(0)
  m, n = rng.normal(0.5, 1, 50), rng.normal(0, 1, 70)
  m[:5] = n[:5]  # ties
  expected = metrics.roc_auc_score(np.r_[np.ones(50), np.zeros(70)],
                                   np.r_[m, n])
  assert privacy_audit.auc(m, n) == pytest.approx(expected, abs=1e-12)


def test_perfect_separation_certifies_the_closed_form_bound():
  result = privacy_audit.audit(np.arange(20) + 100.0, np.arange(20), 0.0)
  lo = 0.025**(1 / 20)
  assert result.epsilon_lower_bound == pytest.approx(math.log(lo / (1 - lo)),
                                                     rel=1e-9)
  assert result.auc == 1.0 and result.best_advantage == 1.0


def test_identical_distributions_certify_little():
  rng = np.random.default_rng(1)
  result = privacy_audit.audit(rng.normal(size=200), rng.normal(size=200),
                               1e-5)
  assert result.epsilon_lower_bound < 0.5
  assert abs(result.auc - 0.5) < 0.1
  with pytest.raises(ValueError, match='members and non-members'):
    privacy_audit.audit([], [1.0], 1e-5)

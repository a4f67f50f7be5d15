"""Privacy-group validation and seeded client assignment."""

import numpy as np
import pytest

from tff_hdp.privacy import privacy_groups as pg


def test_group_validation_messages():
  with pytest.raises(ValueError, match='epsilon must be'):
    pg.PrivacyGroup('a', 0.0, 1e-5)
  with pytest.raises(ValueError, match='delta must be in'):
    pg.PrivacyGroup('a', 1.0, 1.5)
  with pytest.raises(ValueError, match='ratio r must be'):
    pg.PrivacyGroup('a', 1.0, 1e-5, ratio=-0.1)
  with pytest.raises(ValueError, match='without an epsilon'):
    pg.PrivacyGroup('a', None, 1e-5)
  assert not pg.PrivacyGroup('out').is_private


def test_fractions_give_exact_sizes_and_are_seeded():
  ids = [f'c{i}' for i in range(103)]
  groups = [pg.PrivacyGroup('a', 1.0, 1e-5), pg.PrivacyGroup('b', 4.0, 1e-5),
            pg.PrivacyGroup('c')]
  a1 = pg.assign_by_fractions(ids, groups, [0.5, 0.3, 0.2], seed=1)
  a2 = pg.assign_by_fractions(ids, groups, [0.5, 0.3, 0.2], seed=1)
  a3 = pg.assign_by_fractions(ids, groups, [0.5, 0.3, 0.2], seed=2)
  assert a1.group_sizes().sum() == 103
  # 51.5, 30.9, 20.6 -> largest remainders round up 30.9 and 20.6.
  assert list(a1.group_sizes()) == [51, 31, 21]
  assert dict(a1.client_groups) == dict(a2.client_groups)
  assert dict(a1.client_groups) != dict(a3.client_groups)
  np.testing.assert_array_equal(a1.one_hot(ids[0]).sum(), 1.0)


def test_opt_out_assignment_and_pool():
  ids = list(range(2000))
  pool = list(range(700, 900))
  a = pg.assign_opt_out(ids, [pg.PrivacyGroup('p', 3.6, 1e-4)], 0.05, seed=0,
                        opt_out_pool=pool)
  assert a.groups[-1].name == 'opt_out'
  assert list(a.group_sizes()) == [1900, 100]
  assert set(a.members(1)) <= set(pool)
  with pytest.raises(ValueError, match='opt-out fraction'):
    pg.assign_opt_out(ids, [pg.PrivacyGroup('p', 3.6, 1e-4)], 1.2, seed=0)
  with pytest.raises(ValueError, match='eligible'):
    pg.assign_opt_out(ids, [pg.PrivacyGroup('p', 3.6, 1e-4)], 0.5, seed=0,
                      opt_out_pool=pool)


def test_explicit_map_must_cover_every_client():
  groups = [pg.PrivacyGroup('p', 1.0, 1e-5), pg.PrivacyGroup('np')]
  a = pg.assign_explicit(['x', 'y'], groups, {'x': 'p', 'y': 'np'})
  assert a.group_of('y') == 1
  with pytest.raises(ValueError, match='in no privacy group'):
    pg.assign_explicit(['x', 'y', 'z'], groups, {'x': 'p', 'y': 'np'})
  with pytest.raises(ValueError, match='unknown privacy group'):
    pg.assign_explicit(['x'], groups, {'x': 'other'})
  with pytest.raises(KeyError, match='no privacy group'):
    a.group_of('nobody')

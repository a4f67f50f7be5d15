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


_LEVELS = [pg.PrivacyGroup('private_eps1', 1.0, 1e-5),
           pg.PrivacyGroup('private_eps8', 8.0, 1e-5)]


def _write(path, text):
  path.write_text(text)
  return str(path)


def test_a_levels_file_gives_each_client_its_own_level(tmp_path):
  ids = [f'c{i}' for i in range(6)]
  csv_file = _write(tmp_path / 'levels.csv', 'client_id,level\n' + ''.join(
      f'{c},{level}\n' for c, level in zip(
          ids, ['1', '1', 'private_eps8', '8.0', 'opt_out', '8'])))
  json_file = _write(tmp_path / 'levels.json', '{"c0": 1, "c1": "1", '
                     '"c2": 8, "c3": "private_eps8", "c4": "opt_out", '
                     '"c5": 8.0}')
  for path in (csv_file, json_file):
    assignment = pg.assign_from_levels(ids, _LEVELS,
                                       pg.read_levels_file(path))
    assert [g.name for g in assignment.groups] == [
        'private_eps1', 'private_eps8', 'opt_out']
    assert [assignment.group_of(c) for c in ids] == [0, 0, 1, 1, 2, 1]
    assert not assignment.groups[2].is_private


def test_integer_client_ids_are_matched_as_written(tmp_path):
  path = _write(tmp_path / 'levels.csv', '0,1\n1,8\n')
  assignment = pg.assign_from_levels([0, 1], _LEVELS,
                                     pg.read_levels_file(path))
  assert assignment.group_of(0) == 0 and assignment.group_of(1) == 1


@pytest.mark.parametrize('text,ids,message', [
    ('a,1\na,8\n', ['a'], r"client 'a' is listed twice \(line 2\)"),
    ('a,1,x\n', ['a'], r'line 1 has 3 fields'),
    ('client_id,level\n', ['a'], r'it lists no client'),
    ('a,1\nb,8\n', ['a', 'b', 'c', 'd'],
     r'2 of the 4 clients have no level, e\.g\. c, d'),
    ('a,1\nb,8\nz,8\n', ['a', 'b'],
     r'1 listed clients are not in the task, e\.g\. z'),
    ('a,1\nb,3.6\n', ['a', 'b'],
     r"client b: unknown level '3\.6'; the levels are 1, 8"),
    ('a,1\nb,1\n', ['a', 'b'],
     r'no client chose private_eps8: a level without clients is no level'),
])
def test_a_bad_levels_file_is_refused_naming_what_is_wrong(tmp_path, text,
                                                           ids, message):
  path = _write(tmp_path / 'levels.csv', text)
  with pytest.raises(ValueError, match=message):
    pg.assign_from_levels(ids, _LEVELS, pg.read_levels_file(path))


@pytest.mark.parametrize('text,message', [
    ('["a", "b"]', 'one object'),
    ('[]', 'one object'),
    ('{}', 'it lists no client'),
    # json.loads alone keeps the last value of a duplicated key.
    ('{"a": 1, "b": 8, "a": 8}', r"client 'a' is listed twice"),
    ('{"1": 1, "1": 1}', r"client '1' is listed twice"),
])
def test_a_bad_json_levels_file_is_refused(tmp_path, text, message):
  path = _write(tmp_path / 'levels.json', text)
  with pytest.raises(ValueError, match=message):
    pg.read_levels_file(path)


def test_label_bands_give_each_client_its_most_frequent_labels_level():
  bands = pg.parse_label_bands('0-3:1, 4-8:8,9:opt_out')
  assert bands == [(frozenset({0, 1, 2, 3}), '1'),
                   (frozenset({4, 5, 6, 7, 8}), '8'),
                   (frozenset({9}), 'opt_out')]
  labels = {'a': np.array([2, 2, 5]), 'b': np.array([5, 5, 9, 0]),
            'c': np.array([9]), 7: np.array([1, 4, 6, 7, 8, 3, 3])}
  assert pg.levels_by_label(labels, bands) == {'a': '1', 'b': '8',
                                               'c': 'opt_out', '7': '1'}


@pytest.mark.parametrize('text,labels,message', [
    ('0-3:1,3-9:8', None, r"label 3 is in two bands \('0-3:1' and '3-9:8'\)"),
    ('0-3', None, r"'0-3' is not labels:level"),
    ('3-0:1', None, r"'3-0:1' is not labels:level"),
    ('a:1', None, r"'a:1' is not labels:level"),
    ('0-3:1,4-8:8', {'x': np.array([9, 9, 0])},
     r"client x's most frequent label 9 is in no band"),
    ('0-9:1,10-12:8', {'x': np.array([0, 9])},
     r'no client holds label\(s\) 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12'),
])
def test_bad_label_bands_are_refused_naming_what_is_wrong(text, labels,
                                                          message):
  with pytest.raises(ValueError, match=message):
    pg.levels_by_label(labels or {}, pg.parse_label_bands(text))


def test_band_labels_are_each_groups_labels_from_its_bands():
  """A level may have several bands (its labels are their union); a group
  without a band (here the opt-out one) has no labels to be scored on."""
  bands = pg.parse_label_bands('0-1:1,2-3:private_eps8,4:1,5-9:8')
  assert pg.band_labels(_LEVELS, bands) == {
      'private_eps1': frozenset({0, 1, 4}),
      'private_eps8': frozenset({2, 3, 5, 6, 7, 8, 9})}
  assert pg.band_labels(_LEVELS, pg.parse_label_bands('0-8:1,9:opt_out')) == {
      'private_eps1': frozenset(range(9)), 'opt_out': frozenset({9})}
  with pytest.raises(ValueError, match=r"band \[0, 1\]: unknown level '3'"):
    pg.band_labels(_LEVELS, pg.parse_label_bands('0-1:3'))

"""--privacy_levels_file and --levels_by_label: each client's own level from
a file or from its data, on the command line (digits: the clients of digits
0-3 at eps 1, 4-8 at eps 8, 9 opting out), and their refusals as one
line."""

import csv
import json
import os

import pytest

from tests import repository

_IDS = [f'digit{d}_client{c}' for d in range(10) for c in range(10)]


def _level(client):
  digit = int(client[len('digit')])
  return '1' if digit <= 3 else '8' if digit <= 8 else 'opt_out'


def _levels_file(tmp_path, ids=_IDS):
  path = tmp_path / 'levels.csv'
  path.write_text('client_id,level\n' + ''.join(
      f'{c},{_level(c)}\n' for c in ids))
  return str(path)


@pytest.mark.tf
@pytest.mark.parametrize('rule', ['file', 'labels'])
def test_the_groups_are_the_files_or_the_label_bands(tmp_path, rule):
  """digits: each client holds one digit, so the bands 0-3, 4-8 and 9 give
  the file's groups."""
  out = str(tmp_path / 'out')
  levels = (f'--privacy_levels_file={_levels_file(tmp_path)}'
            if rule == 'file' else '--levels_by_label=0-3:1,4-8:8,9:opt_out')
  result = repository.run_program(
      'run_experiment.py', '--epsilons=1,8', '--rounds=1', levels,
      '--eval_every=1', '--checkpoint_every=0', f'--output_dir={out}')
  assert result.returncode == 0, result.stderr[-2000:]
  with open(os.path.join(out, 'fedhdp', 'summary.json')) as f:
    summary = json.load(f)
  assert [(g['name'], g['clients']) for g in summary['groups']] == [
      ('private_eps1', 40), ('private_eps8', 50), ('opt_out', 10)]
  # The heading says the share that opted out as assigned, not the flag's.
  assert '100 clients, 1 rounds, 10 clients per round (poisson), 10% opt out' \
      in result.stdout
  # Each group's accuracy on its labels where the bands make them public;
  # a file's groups keep their label mixtures to themselves.
  group_columns = ['acc_g_worst', 'acc_g_group_private_eps1',
                   'acc_g_group_private_eps8', 'acc_g_group_opt_out']
  with open(os.path.join(out, 'fedhdp', 'rounds.csv')) as f:
    (row,) = csv.DictReader(f)
  with open(os.path.join(out, 'results.csv')) as f:
    (record,) = csv.DictReader(f)
  if rule == 'file':
    assert 'group_labels' not in summary
    assert not [c for c in list(row) + list(record) + list(summary['metrics'])
                if 'worst' in c or 'group' in c]
    return
  assert summary['group_labels'] == {'private_eps1': [0, 1, 2, 3],
                                     'private_eps8': [4, 5, 6, 7, 8],
                                     'opt_out': [9]}
  # rounds.csv and results.csv hold 4 decimals (the run's noise is secret,
  # so the values are any run's).
  values = [float(row[c]) for c in group_columns]
  assert values == [pytest.approx(float(record[c]), abs=1e-4)
                    for c in group_columns]
  assert values == [pytest.approx(summary['metrics'][c], abs=1e-4)
                    for c in group_columns]
  assert values[0] == min(values[1:])
  assert '| Acc_g | Acc_g,worst | Acc_g[private_eps1] |' in ' '.join(
      result.stdout.split())


@pytest.mark.tf
def test_a_file_that_misses_a_client_of_the_task_is_one_line(tmp_path):
  result = repository.run_program(
      'run_experiment.py', '--epsilons=1,8', '--rounds=1',
      f'--privacy_levels_file={_levels_file(tmp_path, _IDS[:-2])}',
      f'--output_dir={tmp_path / "out"}')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      f'run_experiment.py: error: --privacy_levels_file={tmp_path}/'
      'levels.csv: 2 of the 100 clients have no level, e.g. '
      'digit9_client8, digit9_client9.']


@pytest.mark.parametrize('extra,message', [
    (['--epsilons=1,3'], "unknown level '8'; the levels are 1, 3"),
    (['--epsilons=1,8', '--opt_out_fraction=0.1'],
     '--opt_out_fraction draws levels at random'),
    (['--epsilons=1,8,10'], 'no client chose private_eps10'),
])
def test_a_file_the_flags_cannot_use_is_refused_before_loading(
    tmp_path, extra, message):
  result = repository.run_program(
      'run_experiment.py', *extra, '--dry_run',
      f'--privacy_levels_file={_levels_file(tmp_path)}')
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert message in line, line


@pytest.mark.parametrize('name,text,message', [
    ('levels.csv', 'a,1\nb,8\na,8\n', "client 'a' is listed twice (line 3)."),
    ('levels.json', '{"a": 1, "b": 8, "a": 8}', "client 'a' is listed twice."),
])
def test_a_file_listing_a_client_twice_is_refused_before_loading(
    tmp_path, name, text, message):
  path = tmp_path / name
  path.write_text(text)
  result = repository.run_program(
      'run_experiment.py', '--epsilons=1,8', '--dry_run',
      f'--privacy_levels_file={path}')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      f'run_experiment.py: error: --privacy_levels_file={path}: {message}']


def test_a_rule_that_leaves_a_level_without_clients_is_refused_before_loading():
  result = repository.run_program(
      'run_experiment.py', '--epsilons=1,8', '--dry_run',
      '--levels_by_label=0-8:1,9:opt_out')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      'run_experiment.py: error: --levels_by_label=0-8:1,9:opt_out: no band '
      'chose private_eps8: a level without clients is no level.']


@pytest.mark.tf
def test_a_rule_naming_labels_the_task_lacks_is_one_line_and_trains_nothing(
    tmp_path):
  out = tmp_path / 'out'
  result = repository.run_program(
      'run_experiment.py', '--epsilons=1,8', '--rounds=1',
      '--levels_by_label=0-3:1,4-8:8,9-11:opt_out', f'--output_dir={out}')
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      'run_experiment.py: error: --levels_by_label=0-3:1,4-8:8,9-11:opt_out: '
      'no client holds label(s) 10, 11: the task lacks them.']
  assert not list(out.rglob('summary.json')) and not list(
      out.rglob('rounds.csv'))


def _few_at_eps8(tmp_path):
  """Digit 9's clients at eps 8 but one, which opts out: 9 clients."""
  def level(client):
    if client == 'digit9_client0':
      return 'opt_out'
    return '8' if client.startswith('digit9') else '1'
  path = tmp_path / 'levels.csv'
  path.write_text(''.join(f'{c},{level(c)}\n' for c in _IDS))
  return f'--privacy_levels_file={path}'


@pytest.mark.tf
@pytest.mark.parametrize('levels,message', [
    (_few_at_eps8, "privacy level 'private_eps8' holds 9 of the 100 clients, "
     '0.9 expected a round'),
    (lambda _: '--level_fractions=0.95,0.05', '--opt_out_fraction and '
     "--level_fractions: privacy level 'private_eps8' holds 5 of the 100 "
     'clients, 0.5 expected a round'),
])
def test_a_level_expecting_fewer_than_one_client_a_round_is_refused(
    tmp_path, levels, message):
  """At 10 of 100 clients a round a level needs 10 clients: FedHDP's mean
  of a level with fewer averages no client in most rounds."""
  out = tmp_path / 'out'
  result = repository.run_program(
      'run_experiment.py', '--epsilons=1,8', '--rounds=1', levels(tmp_path),
      f'--output_dir={out}')
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()
  assert message in line, line
  assert line.endswith('give it 10 clients or more, or raise '
                       '--clients_per_round.'), line
  assert not list(out.rglob('rounds.csv'))

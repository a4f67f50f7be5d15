"""The one round loop (`simulation.round_loop.run_rounds`) with a stand-in
program: evaluation cadence, rounds.csv cells, release managers, the budget
guard; and the untrusted setting's example order following --seed."""

import collections
import csv
import types

import numpy as np

import pytest

from tff_hdp.simulation import checkpointing
from tff_hdp.simulation import round_loop
from tff_hdp.simulation import selection
from tff_hdp.simulation import untrusted_setting

pytestmark = pytest.mark.tf


class _Program(round_loop.RoundProgram):
  columns = ('round', 'x', 'acc_g')

  def __init__(self, rounds, ledger=None):
    self.rounds = rounds
    self.ledger = ledger
    self.evaluated = []

  def train(self, round_num):
    return {'x': round_num / 3, 'hidden': 'not a column'}

  def evaluate(self, round_num):
    self.evaluated.append(round_num)
    return {'acc_g': 50.0 + round_num}

  def weights(self):
    return None


class _Manager:
  def __init__(self):
    self.released = {}

  async def release(self, value, key):
    self.released[key] = value


def test_evaluates_on_the_cadence_and_last_and_writes_only_columns(tmp_path):
  program, manager = _Program(5), _Manager()
  result = round_loop.run_rounds(program, output_dir=str(tmp_path),
                                 eval_every=2, progress=False,
                                 release_managers=[manager])
  assert program.evaluated == [2, 4, 5]
  assert result.final_metrics == {'acc_g': 55.0}
  with open(tmp_path / 'rounds.csv', newline='') as f:
    lines = f.read().splitlines()
  assert lines == ['round,x,acc_g', '1,0.333333,', '2,0.666667,52',
                   '3,1,', '4,1.33333,54', '5,1.66667,55']
  assert manager.released[1] == {'x': pytest.approx(1 / 3)}
  assert manager.released[2] == {'x': pytest.approx(2 / 3), 'acc_g': 52.0}
  assert result.rows[0]['hidden'] == 'not a column'  # measured, not written


def test_budget_guard_refuses_the_round_and_keeps_the_rows_before(tmp_path):
  budget = types.SimpleNamespace(name='p', target_epsilon=1.0)
  ledger = types.SimpleNamespace(
      first_exceeded=lambda r: (budget, 1.5) if r >= 3 else None)
  with pytest.raises(round_loop.BudgetExhaustedError,
                     match=r"round 3 refused: privacy group 'p' would spend "
                     r'epsilon=1.5, above its target 1.'):
    round_loop.run_rounds(_Program(5, ledger), output_dir=str(tmp_path),
                          progress=False)
  with open(tmp_path / 'rounds.csv', newline='') as f:
    assert [r['round'] for r in csv.DictReader(f)] == ['1', '2']


def test_untrusted_clients_read_their_data_in_the_order_of_the_seed(
    monkeypatch):
  asked = []
  task = types.SimpleNamespace(
      client_ids=['a', 'b'],
      train_dataset=lambda c, seed: asked.append((c, seed)))
  process = types.SimpleNamespace(
      next=lambda state, data: types.SimpleNamespace(state=state))
  plans = [types.SimpleNamespace(epsilon_after=lambda r: 0.1 * r)] * 2
  monkeypatch.setattr(untrusted_setting.dp_sgd, 'make_client_data',
                      lambda *args, **kwargs: None)
  for seed in (0, 7):
    settings = untrusted_setting.UntrustedSettings(rounds=2, seed=seed)
    program = untrusted_setting.UntrustedRounds(
        task, process, None, plans, [1.0, 1.0], [11, 12], settings, 'x')
    program.train(2)
  order = selection.every_client_order_seed
  assert asked == [('a', order(0, 2)), ('b', order(0, 2)),
                   ('a', order(7, 2)), ('b', order(7, 2))]
  assert order(0, 2) == 2 and order(7, 2) != order(0, 2)


class _Clock:
  """Stands in for time.time: advances only when a round trains."""

  def __init__(self, now=0.0):
    self.now = now

  def __call__(self):
    return self.now


class _SavedProgram(_Program):
  """A program whose state (one array) goes into a real checkpoint."""

  def __init__(self, rounds, clock):
    super().__init__(rounds)
    self.clock = clock
    self.state = collections.OrderedDict(w=np.zeros(2, np.float32))

  def train(self, round_num):
    self.clock.now += 10.0
    self.state = collections.OrderedDict(w=self.state['w'] + 1.0)
    return super().train(round_num)

  def restore(self, checkpoint):
    state, done, _ = checkpoint.restore(self.state)
    if state is not None:
      self.state = state
    return done

  def save(self, checkpoint, round_num):
    checkpoint.save(self.state, round_num)


def _run_saved(tmp_path, rounds, clock, monkeypatch, checkpoint_every=1,
               repeats_rounds=True, release_managers=()):
  monkeypatch.setattr(round_loop.time, 'time', clock)
  program = _SavedProgram(rounds, clock)
  program.repeats_rounds = repeats_rounds
  checkpoint = checkpointing.RunCheckpoint(str(tmp_path / 'checkpoints'),
                                           {'run': 1})
  result = round_loop.run_rounds(program, output_dir=str(tmp_path),
                                 progress=False, checkpoint=checkpoint,
                                 checkpoint_every=checkpoint_every,
                                 release_managers=release_managers)
  return program, result


def _saved_rounds(tmp_path):
  return sorted(int(p.name.split('_')[1])
                for p in (tmp_path / 'checkpoints').glob('round_*'))


def test_a_run_whose_noise_cannot_be_repeated_saves_every_round(
    tmp_path, monkeypatch):
  """Such a run cannot redo a released round, so a kill past its last
  checkpoint would end it for good: it saves every round whatever
  `checkpoint_every`, and a kill leaves at most the round in flight."""
  _run_saved(tmp_path / 'seeded', 3, _Clock(), monkeypatch,
             checkpoint_every=10)
  assert _saved_rounds(tmp_path / 'seeded') == [3]  # the cadence, and last
  _run_saved(tmp_path / 'unseeded', 3, _Clock(), monkeypatch,
             checkpoint_every=10, repeats_rounds=False)
  assert _saved_rounds(tmp_path / 'unseeded') == [2, 3]  # every; 2 kept
  program, result = _run_saved(tmp_path / 'unseeded', 4, _Clock(),
                               monkeypatch, checkpoint_every=10,
                               repeats_rounds=False)
  assert [r['round'] for r in result.rows] == [4]
  np.testing.assert_array_equal(program.state['w'], [4.0, 4.0])
  # A round released past the last save (the kill's window) is not redone.
  with open(tmp_path / 'unseeded' / 'rounds.csv', 'a') as f:
    f.write('5,1.66667,\n')
  with pytest.raises(checkpointing.CheckpointError,
                     match='released rounds 5-5 past its last checkpoint '
                     r'\(round 4\) with noise this run cannot repeat'):
    _run_saved(tmp_path / 'unseeded', 6, _Clock(), monkeypatch,
               checkpoint_every=10, repeats_rounds=False)


def test_a_round_saved_but_not_released_is_released_on_resume(
    tmp_path, monkeypatch):
  """Such a run saves a round, with its row, before releasing it. Killed in
  between (here right after round 3's save), its resume releases round 3's
  kept row once and goes on: rounds.csv and the release manager end as an
  uninterrupted run's."""
  _run_saved(tmp_path / 'whole', 5, _Clock(), monkeypatch,
             checkpoint_every=10, repeats_rounds=False)
  real = checkpointing.RunCheckpoint.record_seconds

  def killed_after_3(self, round_num, seconds):
    real(self, round_num, seconds)
    if round_num == 3:
      raise KeyboardInterrupt

  monkeypatch.setattr(checkpointing.RunCheckpoint, 'record_seconds',
                      killed_after_3)
  first = _Manager()
  with pytest.raises(KeyboardInterrupt):
    _run_saved(tmp_path / 'killed', 5, _Clock(), monkeypatch,
               checkpoint_every=10, repeats_rounds=False,
               release_managers=[first])
  assert sorted(first.released) == [1, 2]
  monkeypatch.setattr(checkpointing.RunCheckpoint, 'record_seconds', real)
  second = _Manager()
  program, result = _run_saved(tmp_path / 'killed', 5, _Clock(), monkeypatch,
                               checkpoint_every=10, repeats_rounds=False,
                               release_managers=[second])
  assert [r['round'] for r in result.rows] == [4, 5]
  assert sorted(second.released) == [3, 4, 5]
  assert second.released[3] == {'x': 1.0}
  np.testing.assert_array_equal(program.state['w'], [5.0, 5.0])
  for name in ('whole', 'killed'):
    with open(tmp_path / name / 'rounds.csv', newline='') as f:
      assert f.read().splitlines() == [
          'round,x,acc_g', '1,0.333333,', '2,0.666667,', '3,1,',
          '4,1.33333,', '5,1.66667,55'], name


def test_seconds_count_every_process_of_a_resumed_run(tmp_path, monkeypatch):
  _, first = _run_saved(tmp_path, 3, _Clock(0.0), monkeypatch)
  assert first.seconds == 30.0
  # A new process (its clock elsewhere) resumes after round 3.
  program, second = _run_saved(tmp_path, 5, _Clock(1000.0), monkeypatch)
  assert [r['round'] for r in second.rows] == [4, 5]
  assert second.seconds == 50.0
  np.testing.assert_array_equal(program.state['w'], [5.0, 5.0])


def test_a_damaged_checkpoint_gives_way_to_the_one_before(
    tmp_path, monkeypatch, capsys):
  _run_saved(tmp_path, 3, _Clock(), monkeypatch)  # keeps rounds 2 and 3
  newest = tmp_path / 'checkpoints' / 'round_3'
  damaged = [p for p in newest.rglob('*') if p.is_file()]
  assert damaged
  for path in damaged:
    path.write_bytes(b'cut short')
  program, result = _run_saved(tmp_path, 3, _Clock(500.0), monkeypatch)
  assert 'resuming from round 2' in capsys.readouterr().out
  assert [r['round'] for r in result.rows] == [3]  # round 3 redone
  np.testing.assert_array_equal(program.state['w'], [3.0, 3.0])
  assert result.seconds == 30.0  # 20 s to round 2, then 10 s
  with open(tmp_path / 'rounds.csv', newline='') as f:
    assert [r['round'] for r in csv.DictReader(f)] == ['1', '2', '3']
  # With every checkpoint damaged, the run stops and says so.
  for path in (tmp_path / 'checkpoints').rglob('*'):
    if path.is_file() and path.parent.name.startswith('round_'):
      path.write_bytes(b'cut short')
  with pytest.raises(checkpointing.CheckpointError,
                     match='is unreadable.*delete it to start over'):
    _run_saved(tmp_path, 3, _Clock(), monkeypatch)

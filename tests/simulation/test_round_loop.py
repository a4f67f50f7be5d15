"""The one round loop (`simulation.round_loop.run_rounds`) with a stand-in
program: evaluation cadence, rounds.csv cells, release managers, the budget
guard; and the untrusted setting's example order following --seed."""

import csv
import types

import pytest

from tff_hdp.simulation import round_loop
from tff_hdp.simulation import selection
from tff_hdp.simulation import untrusted_setting


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

"""fedhdp_ddp's noise multipliers before any training: each private level's
least multiplier under TFF's distributed noise at each bit width and
rounding, beside the central Gaussian's at the same participation.

The plan is the rule's own (`fedhdp_ddp`'s `plan_privacy`, as a run makes
it before claiming its folder): devices at --clients_per_round a round,
each at most --max_participations rounds --min_separation apart, no
amplification, the model's size --num_parameters (TFF's rotation, scale and
rounding inflate the sensitivity with it). A width at which no noise meets
a level prints "refused", as the run is. FeO2 MNIST's setting
(RESULTS.md §17):

  .venv/bin/python benchmarks/ddp_multipliers.py

With --dropouts, what a run with `--simulate_dropout` at each of them
prints for each level (at the first of --bits, conditional rounding, a
slot per group), from the devices --seed drops (`selection.finishing`)
and TFF's numbers for the level's multiplier, without training:

  .venv/bin/python benchmarks/ddp_multipliers.py --bits=16 --dropouts=0.1,0.3
"""

from __future__ import annotations

import os
import sys
import warnings

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tff_hdp.learning import algorithms  # noqa: E402
from tff_hdp.learning import trusted_rules  # noqa: E402
from tff_hdp.privacy import min_separation  # noqa: E402
from tff_hdp.privacy import plans  # noqa: E402
from tff_hdp.privacy import privacy_groups  # noqa: E402
from tff_hdp.simulation import selection  # noqa: E402

_EPSILONS = flags.DEFINE_list('epsilons', ['1', '3.6', '10'],
                              'Each private level\'s epsilon.')
_DELTA = flags.DEFINE_float('delta', 1e-4, 'Every level\'s delta.')
_POPULATION = flags.DEFINE_integer('num_clients', 2000, 'Devices.')
_PER_ROUND = flags.DEFINE_integer('clients_per_round', 100,
                                  'Devices a round (noise shares a sum).')
_SEPARATION = flags.DEFINE_integer('min_separation', 20,
                                   'Least rounds between two of a device.')
_PARTICIPATIONS = flags.DEFINE_integer('max_participations', 25,
                                       'Most rounds a device takes part in.')
_ROUNDS = flags.DEFINE_integer('rounds', 500, 'Rounds.')
_PARAMETERS = flags.DEFINE_integer('num_parameters', 159_010,
                                   'The model\'s size (FeO2 MNIST\'s MLP).')
_CLIP = flags.DEFINE_float('clip_norm', 0.5, 'The fixed clip norm S.')
_BITS = flags.DEFINE_list('bits', ['12', '14', '16', '20'],
                          'Bit widths, each for every level.')
_MECHANISM = flags.DEFINE_enum('ddp_mechanism', 'dgauss',
                               ['dgauss', 'skellam'], 'The discrete noise.')
_DROPOUTS = flags.DEFINE_list('dropouts', [], 'Each device\'s chance of '
                              'failing to send (--simulate_dropout).')
_SEED = flags.DEFINE_integer('seed', 0, 'The run\'s --seed, which draws '
                             'the dropouts.')


def _multiplier(record, level, device, clip, **kwargs):
  """`record`'s noise multiplier for `level` (every device in it), or None
  where its plan refuses the level."""
  assignment = privacy_groups.GroupAssignment(
      (level,), {i: 0 for i in range(device.population)})
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      plan = record.plan_privacy(assignment, device, _ROUNDS.value, clip,
                                 'expected', allow_large_delta=False,
                                 **kwargs)
  except ValueError as error:  # only the plan's refusal of the level
    if 'meets its target' not in str(error):
      raise
    return None
  return plan.noise_multipliers[0]


def _given(options, z, bits, device, dropout):
  """The rule's accounting of its noise at `z` (`trusted_rules.
  distributed_accounting`, at TFF's numbers) in rounds with the devices
  --seed leaves at `dropout`."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    shares = trusted_rules.distributed_accounting(
        options, bits, _CLIP.value, device, _PARAMETERS.value)(z)
  finished = [int(selection.finishing(_SEED.value, t,
                                      device.clients_per_round,
                                      dropout).sum())
              for t in range(1, _ROUNDS.value + 1)]
  return shares.given(finished), finished


def _print_dropouts(record, levels, device, clip):
  bits = int(_BITS.value[0])
  options = {'ddp_bits': (bits,), 'ddp_mechanism': 'dgauss',
             'ddp_rounding': 'conditional', 'ddp_slots': 'every_group',
             'r': None, 'level_ratios': None, 'heterogeneity': None}
  zs = [_multiplier(record, level, device, clip, options=options,
                    num_parameters=_PARAMETERS.value) for level in levels]
  print(f'\n{bits} bits, --seed={_SEED.value}: each level\'s printed '
        'epsilon (target in parentheses) with --simulate_dropout')
  for dropout in (float(d) for d in _DROPOUTS.value):
    cells = []
    for level, z in zip(levels, zs):
      shares, finished = _given(options, z, bits, device, dropout)
      eps = shares.epsilon_spent(z, None, _ROUNDS.value, level.delta)
      cells.append(f'{eps:.4g} ({level.epsilon:g})')
    print(f'  {dropout:g}: {min(finished)}-{max(finished)} devices a round; '
          + ', '.join(cells), flush=True)


def main(argv):
  del argv
  levels = [privacy_groups.PrivacyGroup(f'eps{e}', float(e), _DELTA.value)
            for e in _EPSILONS.value]
  device = min_separation.DeviceParticipation(
      _POPULATION.value, _PER_ROUND.value, _SEPARATION.value,
      _PARTICIPATIONS.value)
  clip = plans.ClipSettings(initial_norm=_CLIP.value, learning_rate=0.0)
  print(f'{_PARAMETERS.value:,} parameters, {_PER_ROUND.value} devices a '
        f'round, at most {_PARTICIPATIONS.value} participations '
        f'{_SEPARATION.value} rounds apart, delta {_DELTA.value:g}, '
        f'{_MECHANISM.value}')
  print('| bits | rounding | ' + ' | '.join(
      f'z at eps {e}' for e in _EPSILONS.value) + ' |')
  print('|---|---|' + '---|' * len(levels))
  central = [_multiplier(algorithms.REGISTRY['fedhdp'], level, device, clip,
                         options={'r': None, 'level_ratios': None,
                                  'heterogeneity': None},
                         num_parameters=_PARAMETERS.value)
             for level in levels]
  print('| (central Gaussian) | | ' + ' | '.join(
      f'{z:.4g}' for z in central) + ' |', flush=True)
  record = algorithms.REGISTRY['fedhdp_ddp']
  for bits in (int(b) for b in _BITS.value):
    for rounding in ('conditional', 'unconditional'):
      options = {'ddp_bits': (bits,), 'ddp_mechanism': _MECHANISM.value,
                 'ddp_rounding': rounding, 'ddp_slots': 'every_group',
                 'r': None, 'level_ratios': None, 'heterogeneity': None}
      zs = [_multiplier(record, level, device, clip, options=options,
                        num_parameters=_PARAMETERS.value)
            for level in levels]
      print(f'| {bits} | {rounding} | ' + ' | '.join(
          'refused' if z is None else f'{z:.4g}' for z in zs) + ' |',
            flush=True)
  if _DROPOUTS.value:
    _print_dropouts(record, levels, device, clip)


if __name__ == '__main__':
  app.run(main)

"""Empirical client-level privacy audit of FedHDP with canary clients.

Canary clients hold a few copies of one random input pattern with one random
label; half of the canaries of each group train (members), half do not. The
attacker scores each canary by the projection of the released model's total
change onto the direction that the canary's own gradient steps push it
(pattern x (one-hot label - uniform)); members score higher, and
`tff_hdp.privacy.privacy_audit` turns member / non-member scores into AUC, advantage
and a lower bound on epsilon (Clopper-Pearson, 95%). A private group's bound
must stay below its accounted epsilon (TPR <= e^eps FPR + delta); the opt-out
group has no guarantee and shows how exposed a client is without DP.

  .venv/bin/python benchmarks/privacy_audit.py
"""

from __future__ import annotations

import os
import sys

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tff_hdp  # noqa: E402,F401  (quiets TF before it is imported)

from cli import entry  # noqa: E402

_ROUNDS = flags.DEFINE_integer('rounds', 100, 'Training rounds.')
_CANARIES = flags.DEFINE_integer(
    'canaries', 60, 'Canary clients per group (half are members).')
_EPSILON = flags.DEFINE_float('epsilon', 3.6, 'Private group target epsilon.')
_DELTA = flags.DEFINE_float('delta', 1e-4, 'Private group target delta.')
_CLIENTS_PER_ROUND = flags.DEFINE_integer('clients_per_round', 10,
                                          'Expected clients per round.')
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', 3, 'Local epochs E.')
_CLIENT_LR = flags.DEFINE_float('client_lr', 0.3, 'Client learning rate.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed.')
_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'results/privacy_audit',
                                  'Where the table is written.')


def _canary(rng, examples: int = 16):
  # Random signs: nearly orthogonal to the digits and to other canaries, so
  # other clients' updates barely move its logits and a member's own does.
  pattern = rng.choice([-1.0, 1.0], size=64).astype('float32')
  x = (pattern + rng.normal(0, 0.05, size=(examples, 64))).astype('float32')
  y = rng.integers(10, size=1).repeat(examples).astype('int32')
  return x, y


def main(argv):
  del argv
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tasks import digits  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.simulation import trusted_setting  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.privacy import privacy_audit  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.simulation import runtime  # pylint: disable=g-import-not-at-top,g-multiple-import
  from tff_hdp.privacy import privacy_groups as pg  # pylint: disable=g-import-not-at-top
  from tff_hdp.federated_task import FederatedTask  # pylint: disable=g-import-not-at-top

  runtime.init()
  base = digits.load(clients_per_digit=10, seed=_SEED.value)
  rng = np.random.default_rng(_SEED.value)
  canaries = {f'canary_{kind}_{k}': (_canary(rng), kind)
              for kind in ('private', 'opt_out')
              for k in range(_CANARIES.value)}
  members = {c for i, c in enumerate(sorted(canaries)) if i % 2 == 0}
  train = dict(base.client_train)
  test = dict(base.client_test)
  for c in members:
    train[c] = test[c] = canaries[c][0]
  task = FederatedTask('digits_with_canaries', train, test, base.server_test,
                       base.keras_model_fn, base.loss_fn, base.batch_size)
  groups = [pg.PrivacyGroup('private', _EPSILON.value, _DELTA.value),
            pg.PrivacyGroup('opt_out')]
  base_choices = pg.assign_opt_out(base.client_ids, groups[:1], 0.05,
                                   _SEED.value)
  mapping = {c: base_choices.groups[g].name
             for c, g in base_choices.client_groups.items()}
  mapping.update({c: canaries[c][1] for c in members})
  choices = pg.assign_explicit(task.client_ids, groups, mapping)
  settings = trusted_setting.Settings(
      rounds=_ROUNDS.value,
      sampling=accounting.PoissonSampling(_CLIENTS_PER_ROUND.value /
                                          len(task.client_ids)),
      clip=plans.ClipSettings(initial_norm=0.5,
                               count_stddev=0.1 * _CLIENTS_PER_ROUND.value),
      local_epochs=_LOCAL_EPOCHS.value, client_lr=_CLIENT_LR.value,
      seed=_SEED.value, eval_every=_ROUNDS.value, checkpoint_every=0)
  summary, weights = trusted_setting.run_configuration(
      task, trusted_setting.Configuration('fedhdp', 1.0), choices, settings,
      output_dir=None)
  kernel = np.asarray(weights.trainable[0])  # initial kernel is all zeros

  def score(client):
    # Projection of the model's total change onto the direction a member's
    # gradient steps push it: pattern (x) (one-hot(label) - uniform).
    (x, y) = canaries[client][0]
    direction = np.outer(x.mean(0), np.eye(10)[y[0]] - 0.1)
    return float(np.sum(kernel * direction) / np.linalg.norm(direction))

  header = ['group', 'eps (accounted)', 'members / non-members', 'AUC',
            'advantage', 'eps lower bound (95%)', 'within DP bound']
  rows = []
  for kind, group in (('private', groups[0]), ('opt_out', groups[1])):
    ids = [c for c in canaries if canaries[c][1] == kind]
    result = privacy_audit.audit([score(c) for c in ids if c in members],
                                 [score(c) for c in ids if c not in members],
                                 group.delta or _DELTA.value)
    eps = next(g['epsilon_spent'] for g in summary['groups']
               if g['name'] == group.name)
    within = ('yes' if result.epsilon_lower_bound <= eps else 'NO') if (
        group.is_private) else 'no guarantee'
    rows.append([group.name, f'{eps:.3g}' if group.is_private else 'none',
                 f'{result.members} / {result.non_members}',
                 f'{result.auc:.3f}', f'{result.best_advantage:.3f}',
                 f'{result.epsilon_lower_bound:.3f}', within])
  print(f"\nClient-level membership audit, {_ROUNDS.value} rounds, "
        f"Acc_g {summary['metrics']['acc_g']:.2f}:\n")
  print(tables.markdown_table(header, rows))
  tables.write_table(_OUTPUT_DIR.value, header, rows, stem='audit')


if __name__ == '__main__':
  entry.run(main, __doc__)

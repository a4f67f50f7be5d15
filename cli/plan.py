"""Plans the trusted rules before anything is trained, without TensorFlow.

Usage: python plan.py [--flag=value ...]

For each trusted rule (FedHDP at r = 1 and at the noise-aware ratios,
individualized sampling, DP-FedAvg with everyone at the strictest level) it
prints each group's noise multiplier, sampling rate and weight and the noise
on the mean as S/x (S the clip norm), computed by the functions a run plans
with (`tff_hdp.privacy.planner`); then the best plan with one noise draw
over every per-group rate and weight, and a certificate: a bound that no
such plan's noise on the mean passes; then the bias/noise frontier
(`tff_hdp.privacy.frontier`, the frontier_sampling rule): per knob t its
noise on the mean S/F and the bound on the worst group's squared error at
--heterogeneity, and the default point (the least bound), or --tilt's.

Examples:
  python plan.py --task=mnist_noniid --epsilons=1,3.6,10
      --opt_out_fraction=0 --rounds=500 --clients_per_round=100
  python plan.py --task=mnist_noniid --epsilons=1,3.6,10
      --rounds=500 --clients_per_round=100 --accountant=rdp
"""

from __future__ import annotations

from tff_hdp.cli import entry  # first: names a Python without the stack in one line

from absl import flags as absl_flags  # pylint: disable=g-bad-import-order
from tff_hdp.cli import flags

NUM_PARAMETERS = absl_flags.DEFINE_integer(
    'num_parameters', 7850, 'd, the model\'s trainable parameters, for the '
    'noise-aware ratios (7850: the 1-layer network on 28x28 images with 10 '
    'classes of the MNIST tasks).', lower_bound=1)
TOLERANCE = absl_flags.DEFINE_float(
    'certificate_tolerance', 0.01, 'How close (as a share of the noise on '
    'the mean) the certificate\'s bound is brought to the best one-noise '
    'plan found; 0: skip the best one-noise plan.', lower_bound=0.0)
_OWN = ('num_parameters', 'certificate_tolerance')


def _validate() -> None:
  flags.check_plan_flags(_OWN)


def _table(rules) -> list[str]:
  lines = [f'{"rule / group":34} {"z_j":>8} {"q_j":>8} {"w_j":>7}   '
           'noise on the mean']
  for rule in rules:
    released, private = rule.divisors
    note = '' if released == private else (
        f' (private groups\' mean S/{private:.1f})')
    lines.append(f'{rule.algorithm} ({rule.title}): S/{released:.1f}{note}')
    plan = rule.plan
    for group, z, q, w, k in zip(
        plan.assignment.groups, plan.noise_multipliers, plan.rates(),
        rule.weights(), plan.assignment.group_sizes()):
      if k > 0:
        lines.append(f'  {group.name:32} {z:8.4f} {q:8.4f} {w:7.3f}')
  return lines


def _one_noise(best, budget: float) -> list[str]:
  lines = [f'best one-noise plan (one draw of std z S on sum_j a_j x group '
           f'j\'s clipped sum; {budget:.4g} private clients a round): '
           f'S/{best.divisor:.1f}' + (' = individualized sampling'
                                       if best.individualized else '')]
  lines.append(f'  {"group":32} {"z/a_j":>8} {"q_j":>8} {"a_j":>7}')
  for name, rho, q, a in zip(best.groups, best.noise_multipliers,
                             best.rates, best.weights):
    lines.append(f'  {name:32} {rho:8.4f} {q:8.4f} {a:7.3f}')
  lines.append(
      f'certificate: every one-noise plan with each q_j in [1/N_j, 1] and '
      f'sum_j q_j N_j <= {budget:.4g} has noise on the private groups\' mean '
      f'at least S/{best.divisor_bound:.1f} (Lagrangian bound at lambda '
      f'{best.multiplier:.4g}): at most {100 * best.certified_gap:.2f}% less '
      f'than this plan\'s; {best.rates_evaluated} rates calibrated, '
      f'{best.seconds:.1f} s.')
  return lines


def _frontier(plan, chosen) -> list[str]:
  """The frontier's points and the plan at the `chosen` t."""
  # pylint: disable-next=g-import-not-at-top
  from tff_hdp.privacy import planner
  lines = ['bias/noise frontier (frontier_sampling): each client of group j '
           'counts (q_j*)^t in expectation, q_j* its rate under '
           'individualized sampling; B = max_k B_k / S^2, the worst '
           'group\'s bound']
  lines.append(f'  {"t":>5} {"noise on the mean":>17} {"B":>9}')
  for p in plan.frontier:
    lines.append(f'  {p.tilt:5.2f} {"S/" + format(p.divisor, ".1f"):>17} '
                 f'{p.worst_bound:9.4g}' + ('  <- ' + chosen
                                            if p.tilt == plan.tilt else ''))
  lines.append(f'  at t = {plan.tilt:g}, calibrated: noise on the mean '
               f'S/{planner.noise_divisors(plan)[0]:.1f}')
  lines.append(f'  {"group":32} {"z/a_j":>8} {"q_j":>8} {"a_j":>7} '
               f'{"epsilon":>8}')
  for j, (g, rho, q, a) in enumerate(zip(
      plan.assignment.groups, plan.noise_multipliers, plan.rates(),
      plan.group_scales)):
    if plan.assignment.group_sizes()[j] > 0:
      spent = plan.ledger.epsilon(j, plan.rounds) if g.is_private else None
      lines.append(f'  {g.name:32} {rho:8.4f} {q:8.4f} {a:7.3f} ' +
                   (f'{spent:8.4g}' if spent is not None else
                    f'{"none":>8}'))
  return lines


def main(argv: list[str]) -> None:
  del argv
  # pylint: disable=g-import-not-at-top
  from tff_hdp.cli import trusted
  from tff_hdp.privacy import accounting
  from tff_hdp.privacy import frontier
  from tff_hdp.privacy import planner
  from tff_hdp.privacy import plans
  from tff_hdp.privacy import privacy_groups
  # pylint: enable=g-import-not-at-top
  n = flags.plan_clients()
  levels = flags.private_levels()
  sampling = flags.client_sampling(n)
  fractions = (flags.floats(flags.LEVEL_FRACTIONS)
               if flags.LEVEL_FRACTIONS.value else None)
  assignment = privacy_groups.assign_opt_out(
      list(range(n)), levels, flags.OPT_OUT.value, flags.SEED.value,
      fractions)
  count_stddev = flags.CLIP_COUNT_STDDEV.value
  if flags.CLIP_LR.value > 0:
    count_stddev = trusted.clip_count_stddev(levels, sampling, n)
  clip = plans.ClipSettings(learning_rate=flags.CLIP_LR.value,
                            count_stddev=count_stddev)
  spread = absl_flags.FLAGS['heterogeneity'].value
  spread_h = 1.0 if spread is None else spread
  try:
    for group, size in zip(assignment.groups, assignment.group_sizes()):
      flags.check(size > 0 or not group.is_private,
                  f'--opt_out_fraction/--level_fractions leave level '
                  f'{group.name!r} without clients (of {n}).')
    rules = planner.plan_rules(
        assignment, sampling, flags.ROUNDS.value, clip, NUM_PARAMETERS.value,
        1.0 if spread is None else spread, flags.UNSAFE_LARGE_DELTA.value)
    accountant = sampling.accountant
    sizes = ', '.join(f'{g.name} {k}' for g, k in zip(
        assignment.groups, assignment.group_sizes()))
    z_b = rules[0].plan.ledger.clip_count_stddev
    print(f'{n} clients ({sizes}), {flags.CLIENTS_PER_ROUND.value} a round '
          f'(q = {sampling.q:.4g}), {flags.ROUNDS.value} rounds, accountant '
          f'{accountant.name}' + (
              f' (discretization {accountant.discretization:g})'
              if accountant.name == 'pld' else '') +
          ', clip-count noise ' + ('none (fixed clip)' if z_b is None
                                   else f'z_b {z_b:.4g}') + '.', flush=True)
    print('\n'.join(_table(rules)), flush=True)
    individualized = [r for r in rules
                      if r.algorithm == 'individualized_sampling']
    if TOLERANCE.value > 0 and individualized:
      one = individualized[0].plan
      budget = sum(q * k for q, k, g in zip(
          one.rates(), one.assignment.group_sizes(), one.assignment.groups)
                   if g.is_private)
      best = planner.best_one_noise_plan(one, TOLERANCE.value)
      print('\n'.join(_one_noise(best, budget)), flush=True)
    if individualized:
      curves = frontier.Frontier(individualized[0].plan)
      tilt = absl_flags.FLAGS['tilt'].value
      chosen = 'the --tilt given'
      if tilt is None:
        tilt = curves.default_tilt(spread_h, NUM_PARAMETERS.value)
        chosen = 'the default (least B)'
      print('\n'.join(_frontier(curves.plan(tilt, spread_h,
                                             NUM_PARAMETERS.value), chosen)))
  except accounting.InfeasiblePrivacyTargetError as e:
    message = str(e)
    raise entry.InputError(message if message.startswith('--') else
                           f'--epsilons/--deltas: {message}') from None


def run() -> None:
  """The command line."""
  entry.run(main, __doc__, [('plan.py', sorted(flags.PLAN_FLAGS + _OWN))],
            _validate, needs_tensorflow=False)


if __name__ == '__main__':
  run()

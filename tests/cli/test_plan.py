"""plan.py: its table, certificate and frontier, printed without
TensorFlow (a `tensorflow` that raises on import comes first on the path),
and its refusals, one line naming the flag with exit status 2."""

import os
import subprocess
import sys

import pytest

from tests import repository

ROOT = repository.ROOT
SMALL = ('--num_clients=300', '--epsilons=1,8', '--deltas=1e-3',
         '--rounds=20', '--clients_per_round=30', '--accountant=rdp',
         '--clip_lr=0', '--opt_out_fraction=0.1')


# The tests that read the module's one run of plan.py (`printed`): one
# xdist worker runs it.
_PRINTED = pytest.mark.xdist_group('test_plan_printed')


def _plan(tmp_path, *flags):
  path = repository.tensorflow_stand_in(str(tmp_path / 'no_tf'),
                                        'plan.py imported TensorFlow')
  return subprocess.run(
      [sys.executable, 'plan.py', *flags], cwd=ROOT, capture_output=True,
      text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=os.pathsep.join([path, ROOT])))


@pytest.fixture(scope='module')
def printed(tmp_path_factory):
  """plan.py's output with the default certificate tolerance: the table,
  the certificate and the frontier, all from one run."""
  result = _plan(tmp_path_factory.mktemp('plan'), *SMALL)
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stdout


@_PRINTED
def test_prints_every_rule_and_the_certificate_without_tensorflow(printed):
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import planner  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import privacy_groups as pg  # pylint: disable=g-import-not-at-top
  lines = printed.splitlines()
  levels = [pg.PrivacyGroup('private_eps1', 1.0, 1e-3),
            pg.PrivacyGroup('private_eps8', 8.0, 1e-3)]
  choices = pg.assign_opt_out(list(range(300)), levels, 0.1, 0)
  rules = planner.plan_rules(choices, accounting.PoissonSampling(0.1), 20,
                             plans.ClipSettings(learning_rate=0.0), 7850)
  for rule in rules:
    released, private = rule.divisors
    heading = [l for l in lines if l.startswith(f'{rule.algorithm} (')]
    assert len(heading) == 1, printed
    assert f': S/{released:.1f}' in heading[0]
    note = f"(private groups' mean S/{private:.1f})"
    assert (note in heading[0]) == (released != private), heading[0]
  certificate = [l for l in lines if l.startswith('certificate: ')]
  assert len(certificate) == 1 and '% less than this plan' in certificate[0]


@pytest.mark.parametrize('flags,flag', [
    (('--accountant=moments',), '--accountant'),
    (('--accountant=pld', '--pld_discretization=0.1'),
     '--pld_discretization'),
    (('--epsilons=0.01', '--clip_lr=0.2', '--clip_count_stddev=0.5'),
     '--epsilons/--deltas'),
    (('--sampling=fixed',), '--sampling'),
    (('--tilt=1.5',), '--tilt'),
    (('--tilt=nan',), '--tilt'),
    (('--clients_per_round=301',), '--clients_per_round'),
])
def test_bad_input_is_one_line_naming_the_flag(tmp_path, flags, flag):
  given = {f.split('=')[0] for f in flags}
  base = [f for f in SMALL if f.split('=')[0] not in given]
  result = _plan(tmp_path, *base, *flags)
  assert result.returncode == 2, (result.stdout, result.stderr)
  (line,) = result.stderr.strip().splitlines()
  assert line.startswith('plan.py: error: ') and flag in line, line


@_PRINTED
def test_prints_the_frontier_and_its_default_point(printed):
  """Every t of the grid with the library's S/F and bound, and the least
  bound marked as the default."""
  from tff_hdp.privacy import accounting  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import frontier  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import plans  # pylint: disable=g-import-not-at-top
  from tff_hdp.privacy import privacy_groups as pg  # pylint: disable=g-import-not-at-top
  levels = [pg.PrivacyGroup('private_eps1', 1.0, 1e-3),
            pg.PrivacyGroup('private_eps8', 8.0, 1e-3)]
  choices = pg.assign_opt_out(list(range(300)), levels, 0.1, 0)
  curves = frontier.Frontier(plans.plan_individualized_sampling(
      choices, accounting.PoissonSampling(0.1), 20,
      plans.ClipSettings(learning_rate=0.0)))
  lines = printed.splitlines()
  start = lines.index(next(l for l in lines
                           if l.startswith('bias/noise frontier')))
  rows = lines[start + 2:start + 2 + len(frontier.TILTS)]
  for row, point in zip(rows, curves.points(1.0, 7850)):
    t, divisor, bound = row.split()[:3]
    assert float(t) == point.tilt
    assert divisor == f'S/{point.divisor:.1f}'
    assert float(bound) == pytest.approx(point.worst_bound, rel=1e-3)
  chosen = [r for r in rows if r.endswith('the default (least B)')]
  assert len(chosen) == 1
  assert float(chosen[0].split()[0]) == curves.default_tilt(1.0, 7850)

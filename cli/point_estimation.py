"""The point-estimation experiment (SPEC.md, FeO2 §5): Monte Carlo of the
server's MSE against the closed forms."""

from __future__ import annotations

import os

from tff_hdp.cli import flags


def run() -> None:
  from tff_hdp.estimation import point_estimation  # pylint: disable=g-import-not-at-top
  from tff_hdp.estimation import point_estimation_theory as theory  # pylint: disable=g-import-not-at-top
  from tff_hdp.reporting import tables  # pylint: disable=g-import-not-at-top
  try:
    setting = theory.PointEstimationSetting(
        flags.PE_CLIENTS.value, flags.PE_PRIVATE.value, flags.PE_SAMPLES.value,
        flags.PE_TAU2.value, flags.PE_BETA2.value, flags.PE_GAMMA2.value)
  except ValueError as e:
    raise flags.InputError(f'point_estimation flags: {e}') from None
  r_star = theory.optimal_ratio(setting)
  given = flags.floats(flags.R) if flags.R.value else [1.0]
  ratios = [r_star] + [r for r in given if r != r_star]
  results = point_estimation.monte_carlo(setting, ratios, flags.TRIALS.value,
                                         flags.SEED.value)
  header = ['r', 'empirical server MSE', 'theory sigma_s^2', 'rel. error']
  rows = [[f'{res.ratio:.4g}' + (' (r*)' if res.ratio == r_star else ''),
           f'{res.empirical_mse:.6g}', f'{res.theoretical_variance:.6g}',
           f'{100 * res.relative_error:.2f}%'] for res in results]
  table = tables.markdown_table(header, rows)
  print(f'\nFederated point estimation, {flags.TRIALS.value} trials '
        f'(N={setting.num_clients}, N_p={setting.num_private}):\n')
  print(table)
  print(f"\nsigma_s,opt^2 = {theory.server_variance_optimal(setting):.6g}, "
        f"sigma_s,fedavg^2 = {theory.server_variance_fedavg(setting):.6g}, "
        f"lambda_p* = {theory.optimal_lambda_private(setting):.4g}, "
        f"lambda_np* = {theory.optimal_lambda_non_private(setting):.4g}")
  os.makedirs(flags.OUTPUT_DIR.value, exist_ok=True)
  tables.write_table(flags.OUTPUT_DIR.value, header, rows, records=[
      {'r': res.ratio, 'optimal_r': res.ratio == r_star,
       'empirical_mse': res.empirical_mse,
       'theory_variance': res.theoretical_variance,
       'relative_error': res.relative_error} for res in results])
  print(f'\nTable: {flags.OUTPUT_DIR.value}/')

"""Runs experiments from the command line: the program is
`cli/run_experiment.py` (a pip install of the project makes it the command
`tff-hdp-run`)."""

import cli

if __name__ == '__main__':
  cli.start('run_experiment')

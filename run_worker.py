"""Starts a TFF worker that a driver's --workers runs rounds on: the program is
`cli/run_worker.py` (a pip install of the project makes it the command
`tff-hdp-worker`)."""

import cli

if __name__ == '__main__':
  cli.start('run_worker')

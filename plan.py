"""Plans the trusted rules before anything is trained: the program is
`cli/plan.py` (a pip install of the project makes it the command
`tff-hdp-plan`)."""

import cli

if __name__ == '__main__':
  cli.start('plan')

"""Reproduces the published tables: the program is `cli/reproduce.py` (a pip
install of the project makes it the command `tff-hdp-reproduce`)."""

import cli

if __name__ == '__main__':
  cli.start('reproduce')

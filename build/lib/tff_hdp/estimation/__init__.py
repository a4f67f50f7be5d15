"""The papers' estimation theory: closed forms, and Monte Carlo through the
library's real aggregators and processes to check them against."""

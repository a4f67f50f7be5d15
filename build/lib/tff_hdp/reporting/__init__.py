"""What a person reads: tables, plots, the papers' published figures and the
checks of their claims. Reads results; never trains."""

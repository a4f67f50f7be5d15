"""Privacy bookkeeping in pure Python (no TFF): groups, accounting, plans,
heterogeneity, audits and what a run may release.

The lowest layer: everything that decides what epsilon a run may print lives
here, so it can be read and tested without building a federated process.
"""

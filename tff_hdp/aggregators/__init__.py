"""Server-side aggregation rules, each a `tff.aggregators` factory."""

from tff_hdp.aggregators.heterogeneous_dp import HeterogeneousDPFactory

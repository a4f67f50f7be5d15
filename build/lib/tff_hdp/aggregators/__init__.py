"""Server-side aggregation rules, each a `tff.aggregators` factory."""

from tff_hdp.aggregators.blt_noise import BltSumFactory
from tff_hdp.aggregators.coordinate_median import CoordinateMedianFactory
from tff_hdp.aggregators.heterogeneous_dp import CohortHeterogeneousDPFactory
from tff_hdp.aggregators.heterogeneous_dp import HeterogeneousDPFactory
from tff_hdp.aggregators.merged_groups import MergedGroupsFactory
from tff_hdp.aggregators.per_group_streams import PerGroupStreamsFactory
from tff_hdp.aggregators.pfa import PFAFactory
from tff_hdp.aggregators.robust_hdp import RobustHDPFactory

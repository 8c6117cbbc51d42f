"""The BIDS group level: participants' maps in a shared template space combined vertex by vertex.

:mod:`~prfmap.group.maps` finds the participants' maps, :mod:`~prfmap.group.combine` holds the
statistics, :mod:`~prfmap.group.level` writes the group maps and the report (``run_group``),
:mod:`~prfmap.group.sidecars` their sidecars (one per parameter, each statistic under ``Statistics``).
"""

from prfmap.group.combine import STATISTICS, combine
from prfmap.group.level import GroupResult, run_group
from prfmap.group.maps import FitKey, ParticipantMaps, find_participant_maps
from prfmap.group.sidecars import statistic_metadata

__all__ = [
    "STATISTICS",
    "FitKey",
    "GroupResult",
    "ParticipantMaps",
    "combine",
    "find_participant_maps",
    "run_group",
    "statistic_metadata",
]

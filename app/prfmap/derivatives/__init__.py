"""prfmap's output dataset (BIDS-Derivatives): file names, sidecars, dataset files, map writers.

One layer above :mod:`prfmap.io` and the engine's catalogue: the participant level, the group
level and the report all read and write the same names and sidecars through it.
"""

from prfmap.derivatives.dataset import (
    BIDS_VERSION,
    BIDSIGNORE_LINES,
    bids_uri,
    dataset_description,
    ensure_lines,
    relative_link,
    source_datasets,
    write_dataset_files,
)
from prfmap.derivatives.maps import write_map_files, write_series_files
from prfmap.derivatives.naming import MAP_SUFFIX, PYBIDS_CONFIG, OutputKey, sidecar_of
from prfmap.derivatives.sidecars import (
    FIT_STATUS,
    POLAR_ANGLE_CONVENTION,
    VISUAL_FIELD_CONVENTION,
    hrf_record,
    map_sidecar,
    with_reference,
)

__all__ = [
    "BIDSIGNORE_LINES",
    "BIDS_VERSION",
    "FIT_STATUS",
    "MAP_SUFFIX",
    "POLAR_ANGLE_CONVENTION",
    "PYBIDS_CONFIG",
    "VISUAL_FIELD_CONVENTION",
    "OutputKey",
    "bids_uri",
    "dataset_description",
    "ensure_lines",
    "hrf_record",
    "map_sidecar",
    "relative_link",
    "sidecar_of",
    "source_datasets",
    "with_reference",
    "write_dataset_files",
    "write_map_files",
    "write_series_files",
]

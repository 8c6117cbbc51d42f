"""What prfmap reports of a connective-field fit (``--model cf``): its name, reference and maps.

Plain data, no Keras: the command line, the writers and the docs read it before a backend is chosen.
The numerics are in :mod:`prfmap.engine.connective`.
"""

from __future__ import annotations

CF_MODEL = "cf"
"""``--model cf`` and the ``model-cf`` entity of its maps."""

CF_DESCRIPTION = (
    "connective field: the unit's time series as a gain times the Gaussian-weighted mean of a source "
    "area's time series, the weights falling with geodesic distance along the source's midthickness "
    "surface from a centre vertex"
)
CF_CITATION = "Haak et al., 2013"
CF_REFERENCE = (
    "Haak KV, Winawer J, Harvey BM, Renken R, Dumoulin SO, Wandell BA, Cornelissen FW (2013). "
    "Connective field modeling. NeuroImage 66:376-384."
)
GEODESIC_REFERENCE = (
    "Kimmel R, Sethian JA (1998). Computing geodesic paths on manifolds. Proceedings of the National "
    "Academy of Sciences 95(15):8431-8435."
)

CF_MAPS: dict[str, tuple[str, str]] = {
    "cfcenter": (
        "1",
        "the CF centre: the mesh vertex (0-based, in the hemisphere's mesh of the space) of the source "
        "area at which the connective field is centred",
    ),
    "cfsize": ("mm", "CF size: one standard deviation of the Gaussian, in mm along the source's surface"),
    "gain": (
        "1",
        "gain on the CF-weighted mean of the source's time series (percent signal change per percent)",
    ),
    "baseline": ("%", "the part of the unit's mean the source does not explain (percent signal change)"),
    "r2": ("1", "variance explained by the connective field (fraction, after nuisance projection)"),
    "cvr2": (
        "1",
        "cross-validated variance explained: each run predicted by the CF fitted to the others, from that "
        "run's own source time series (leave one run out, pooled over the folds)",
    ),
    "status": ("1", "the fit status, a sum of the bits listed in Levels"),
    "x": ("deg", "horizontal position inherited from the source's pRFs: their CF-weighted mean"),
    "y": ("deg", "vertical position inherited from the source's pRFs: their CF-weighted mean"),
    "sigma": (
        "deg",
        "size inherited from the source's pRFs: the standard deviation of the CF-weighted sum of their "
        "Gaussians (the square root of the weighted mean of sigma squared plus the weighted spread of "
        "their centres)",
    ),
    "polarangle": ("deg", "polar angle of the inherited position, atan2(y, x)"),
    "eccentricity": ("deg", "eccentricity of the inherited position, hypot(x, y)"),
}
"""Each map of a CF fit: its ``desc`` label, units and description (the sidecars)."""

CF_STATUS: dict[int, str] = {
    1: "no_signal: no usable data, or no positive correlation with the source anywhere on the grid",
    4: "at_bound: the CF size stopped at the grid's largest size (CFSettings.SizeRangeMm)",
    128: "size_at_floor: the CF is no larger than one vertex of the source (the grid's smallest size)",
    256: "not_cross_validated: a single run, so cvr2 could not be computed",
}
"""The status bits a CF fit sets (the bits of :data:`prfmap.engine.catalog.status.STATUS_FLAGS`)."""

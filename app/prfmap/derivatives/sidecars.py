"""The JSON sidecars of prfmap's maps: units, bounds, status levels, conventions, HRF, settings."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prfmap.derivatives.naming import OutputKey
from prfmap.engine import catalog
from prfmap.engine.catalog.settings import FitSettings
from prfmap.io.references import spatial_reference

POLAR_ANGLE_CONVENTION = (
    "degrees, atan2(y, x): 0 = right horizontal meridian, counter-clockwise positive, range (-180, 180]"
)
VISUAL_FIELD_CONVENTION = (
    "degrees of visual angle, origin at fixation (the aperture centre), x to the right, y up"
)
FIT_STATUS = (
    "units without signal (status bit 1) are NaN in every map; every other estimate is written and "
    "the status map (desc-status) flags the doubtful ones: a sum of the bits in its Levels; the "
    "refinement keeps each parameter inside its Bounds (FitSettings.bounds gives the numbers used)"
)


def with_reference(
    sidecar: Mapping[str, Any], key: OutputKey, hemi: str | None, reference_dir: Path | None
) -> dict[str, Any]:
    """``sidecar`` with the ``SpatialReference`` of ``key``'s space (when BIDS asks for one)."""
    reference = spatial_reference(
        key.space,
        hemi=hemi,
        den=key.den,
        subject=key.subject,
        session=key.session,
        fmriprep_dir=reference_dir,
    )
    return {**sidecar, "SpatialReference": reference} if reference else dict(sidecar)


def map_sidecar(
    param: str | None, model: str, settings: FitSettings | None, provenance: Mapping[str, Any]
) -> dict[str, Any]:
    """JSON sidecar of one parameter map (or of a CIFTI file holding all of them).

    Parameters
    ----------
    param : str or None
        Parameter label; None for a file holding every parameter (CIFTI dscalar).
    model : str
        Model name.
    settings : FitSettings or None
        ``FitResult.settings`` (model, refine, HRF, grid, iterations, dtype, backend, versions,
        device), written as ``FitSettings``.
    provenance : mapping
        Inputs, preprocessing, stimulus, timings and software versions of the fit; merged
        into the sidecar as is.

    Returns
    -------
    dict
        A JSON-able dictionary.
    """
    sidecar: dict[str, Any] = {
        "Model": model,
        "ModelDescription": catalog.MODELS[model].summary if model in catalog.MODELS else model,
    }
    if param is None:
        sidecar["Parameters"] = {
            p: {"Units": entry.units, "Description": entry.description}
            for p in provenance.get("MapNames", [])
            if (entry := catalog.parameter_by_label(p)) is not None
        }
    else:
        entry = catalog.parameter_by_label(param)
        units, description = (entry.units, entry.description) if entry else ("n/a", param)
        sidecar.update({"Parameter": param, "Units": units, "Description": description})
        if entry is not None and entry.bound != catalog.UNBOUNDED:
            sidecar["Bounds"] = entry.bound.describe(entry.key)
        if entry is not None and entry.key == "status":
            sidecar["Levels"] = {
                str(bit): f"{name}: {text}" for bit, (name, text) in catalog.STATUS_FLAGS.items()
            }
    sidecar["FitStatus"] = FIT_STATUS
    sidecar["VisualFieldCoordinates"] = VISUAL_FIELD_CONVENTION
    sidecar["PolarAngleConvention"] = POLAR_ANGLE_CONVENTION
    sidecar["HRF"] = {
        "Description": settings.hrf if settings else "SPM canonical two-gamma (nilearn spm_hrf)",
        **hrf_record(settings.hrf_model if settings else None),
    }
    sidecar["FitSettings"] = settings.to_dict() if settings else {}
    sidecar.update({k: v for k, v in provenance.items() if k != "MapNames"})
    return sidecar


def hrf_record(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The sidecar's account of a fit's HRF (``FitSettings.hrf_model``) in BIDS-style keys."""
    if not record:
        return {}
    return {
        "Option": record["option"],
        "PeakDelay": record["delay_s"],
        "PeakDispersion": record["dispersion"],
        "TimeToPeak": record["peak_s"],
        "EstimatedFromUnits": record["units"],
    }

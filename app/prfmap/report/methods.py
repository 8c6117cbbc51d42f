"""The methods paragraph of a participant report, with its references (as fMRIPrep's boilerplate)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prfmap import __version__
from prfmap.engine import catalog
from prfmap.engine.catalog.settings import FitSettings
from prfmap.report.uncertainty import noise_model_text, uncertainty_methods

REFERENCES = {
    "hrf": "Friston KJ, Fletcher P, Josephs O, Holmes A, Rugg MD, Turner R (1998). Event-related fMRI: "
    "characterizing differential responses. NeuroImage 7(1):30-40. doi:10.1006/nimg.1997.0306",
    "fmriprep": "Esteban O, Markiewicz CJ, Blair RW, et al. (2019). fMRIPrep: a robust preprocessing "
    "pipeline for functional MRI. Nat Methods 16:111-116. doi:10.1038/s41592-018-0235-4",
    "nilearn": "Abraham A, Pedregosa F, Eickenberg M, et al. (2014). Machine learning for neuroimaging "
    "with scikit-learn. Front Neuroinform 8:14. doi:10.3389/fninf.2014.00014",
    "keras": "Chollet F, et al. (2015). Keras. https://keras.io",
    "mmp": "Glasser MF, Coalson TS, Robinson EC, et al. (2016). A multi-modal parcellation of human "
    "cerebral cortex. Nature 536:171-178. doi:10.1038/nature18933",
    "wang": "Wang L, Mruczek REB, Arcaro MJ, Kastner S (2015). Probabilistic maps of visual topography in "
    "human cortex. Cereb Cortex 25(10):3911-3931. doi:10.1093/cercor/bhu277",
    "benson18": "Benson NC, Winawer J (2018). Bayesian analysis of retinotopic maps. eLife 7:e40224. "
    "doi:10.7554/eLife.40224",
    "benson": "Benson NC, Butt OH, Brainard DH, Aguirre GK (2014). Correction of distortion in flattened "
    "representations of the cortical surface allows prediction of V1-V3 functional organization from "
    "anatomy. PLoS Comput Biol 10(3):e1003538. doi:10.1371/journal.pcbi.1003538",
}


ATLAS_TEXT = {
    "hcpmmp": lambda cite: f"HCP-MMP1.0{cite.cite('mmp')}",
    "benson14": lambda cite: (
        f"the Benson 2014 anatomical template{cite.cite('benson')}, v4.0{cite.cite('benson18')}"
    ),
    "wang15": lambda cite: f"the Wang 2015 maximum-probability atlas{cite.cite('wang')}",
}
"""Each atlas's name in the methods paragraph, citing its references."""


class Citations:
    """Numbered references in the order the text cites them."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def cite(self, key: str | None) -> str:
        """``[n]`` for ``REFERENCES[key]`` (numbered on first use); empty for ``None`` or an unknown key."""
        return self.cite_text(REFERENCES.get(key or ""))

    def cite_text(self, reference: str | None) -> str:
        """``[n]`` for a reference given as text (a model's or refiner's catalogue entry); empty for none."""
        if not reference:
            return ""
        if reference not in self.texts:
            self.texts.append(reference)
        return f" [{self.texts.index(reference) + 1}]"

    @property
    def references(self) -> list[str]:
        """The cited references, numbered as cited."""
        return list(self.texts)


def _preprocessing(pre: Mapping[str, Any], dummy_scans: int, cite: Citations) -> str:
    confounds = list(pre.get("Confounds") or [])
    high_pass = pre.get("HighPassHz")
    parts = [
        f"The BOLD time series preprocessed by fMRIPrep{cite.cite('fmriprep')} were read; "
        f"{dummy_scans} non-steady-state volume(s) were dropped from each run, "
        + (
            "the time series, given in percent signal change, were fitted as given, their mean removed"
            if pre.get("BOLDScale") == "percent"
            else "each time series was converted to percent signal change of its mean"
        ),
    ]
    removed = []
    if high_pass:
        removed.append(f"a discrete-cosine high-pass basis ({high_pass:g} Hz)")
    if confounds:
        removed.append(f"the confounds {', '.join(confounds)}")
    if removed:
        parts.append(
            f", and {' and '.join(removed)} {'were' if len(removed) > 1 else 'was'} regressed out; the same "
            "regressors were projected out "
            "of every model prediction, so that filtering does not bias the pRF sizes"
        )
    smoothing = ""
    if pre.get("SmoothingFWHM"):
        smoothing = (
            f"Each run was first smoothed spatially with {pre.get('SmoothingMethod') or ''}. Smoothing "
            "averages neighbouring pRFs, which enlarges the estimated pRF sizes, and makes neighbouring "
            "units' errors correlated, so their standard errors are not independent. "
        )
    return (
        "".join(parts)
        + ". "
        + smoothing
        + "Runs that saw the same stimulus were averaged; others were concatenated. "
    )


def _model(
    model: str, settings: FitSettings | None, tr: float | None, fov_deg: float | None, cite: Citations
) -> str:
    spec = catalog.MODELS.get(model)
    description = spec.summary if spec is not None else model
    reference = cite.cite_text(spec.reference if spec is not None else None)
    hrf = settings.hrf if settings else "SPM canonical"
    stref = settings.slice_time_ref if settings else 0.5
    return (
        f"The {model} model, {'an' if description[:1] in 'aeiou' else 'a'} {description}"
        f"{reference}, predicted each response as the overlap of the pRF with the stimulus aperture"
        + (f" ({fov_deg:g}° wide)" if fov_deg else "")
        + f", convolved with the {hrf} haemodynamic response function{cite.cite('hrf')} integrated over "
        f"each repetition time" + (f" (TR {tr:g} s)" if tr else "") + f" and sampled at {stref:g} of it. "
    )


def _search(settings: FitSettings | None, cite: Citations) -> str:
    refine = settings.refine if settings else "lm"
    spec = catalog.REFINERS.get(refine)
    refiner = (
        "no further refinement (the grid estimates are the results)"
        if refine == "none"
        else f"a refinement by {spec.description if spec else refine}"
    )
    grid = settings.grid_points if settings else None
    text = (
        f"A grid search over {grid if grid is not None else 'a grid of'} candidate pRFs chose the starting "
        f"values, followed by {refiner}{cite.cite_text(spec.reference if spec else None)}"
    )
    if refine != "none" and settings and settings.refine_r2_min:
        text += f" of the units whose grid fit explained at least r² = {settings.refine_r2_min:g}"
    return text + ". "


def _noise(settings: FitSettings | None) -> str:
    """``Noise model: ... .`` where the settings describe one (fits before noise models: nothing)."""
    record = getattr(settings, "noise_model", None) or {}
    return f"Noise model: {noise_model_text(settings)}. " if record.get("description") else ""


def _software(settings: FitSettings | None, backend: Mapping[str, Any], cite: Citations) -> str:
    engine = backend.get("backend", settings.backend if settings else "an unrecorded backend")
    version = backend.get("version", settings.backend_version if settings else "")
    keras = backend.get("keras", settings.keras_version if settings else "")
    device = backend.get("device", settings.device if settings else "cpu")
    return f"The fits ran with Keras {keras}{cite.cite('keras')} on {engine} {version} ({device}). "


def methods_text(  # noqa: PLR0913 - keyword-only: each is the source of one of its sentences
    *,
    model: str,
    settings: FitSettings | None,
    backend: Mapping[str, Any],
    preprocessing: Mapping[str, Any],
    dummy_scans: int,
    tr: float | None,
    fov_deg: float | None,
    maps: list[str],
    atlas: bool | str = False,
    uncertainty: bool = False,
) -> tuple[str, list[str]]:
    """The methods paragraph and its numbered references.

    Parameters
    ----------
    model : str
        The pRF model.
    settings : FitSettings or None
        ``FitResult.settings`` (refine, hrf, grid_points, refine_r2_min, slice_time_ref, ...).
    backend : mapping
        ``backend_info()`` (backend, version, keras, device).
    preprocessing : mapping
        The sidecars' ``Preprocessing`` (HighPassHz, Confounds).
    dummy_scans : int
        Volumes dropped per run.
    tr : float, optional
        Repetition time (s).
    fov_deg : float, optional
        Width of the stimulated field.
    maps : list of str
        The map labels written (an r²-type label such as ``cvr2`` adds its definition).
    atlas : bool or str
        The atlas whose visual-area borders were drawn (a key of :data:`ATLAS_TEXT`; ``True``:
        HCP-MMP1.0), cited; ``False``: none.
    uncertainty : bool
        The fit has standard-error maps: say how they were computed, under which noise model, and
        what the ``uncertain`` status bit means. Without them the noise model is named only when
        the settings describe it.

    Returns
    -------
    tuple
        The paragraph and the references it cites, in citation order.
    """
    cite = Citations()
    text = (
        f"Population receptive fields were estimated with prfmap {__version__}. "
        + _preprocessing(preprocessing, dummy_scans, cite)
        + _model(model, settings, tr, fov_deg, cite)
        + _search(settings, cite)
        + (uncertainty_methods(settings) if uncertainty else _noise(settings))
        + _software(settings, backend, cite)
        + "r² is the fraction of variance explained, 1 − Σ(y − ŷ)² / Σy², with data y and prediction ŷ "
        "both projected off the nuisance regressors; it is measured on the data that were fitted."
    )
    others = ", ".join(label for label in maps if label.endswith("r2") and label != "r2")
    if others:
        text += (
            f" The cross-validated maps ({others}) measure the same fraction on runs left out of the fit, "
            "which an over-flexible model cannot inflate."
        )
    text += f" Maps were drawn with nilearn{cite.cite('nilearn')}"
    text += f" on occipital patches projected from the registered sphere{cite.cite('benson')}"
    if atlas:
        name = "hcpmmp" if atlas is True else atlas
        text += f", with the visual-area borders of {ATLAS_TEXT[name](cite)}."
    else:
        text += "."
    return text, cite.references

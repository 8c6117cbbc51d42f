"""``SpatialReference`` of an output: the mesh or image its space name stands for.

BIDS requires the key for every derivative whose space is not a standard template (fsaverage5 and
fsaverage6 are fMRIPrep's legacy names; fsnative and T1w are the participant's own); for template
surfaces it is TemplateFlow's sphere of that density, for the participant's own spaces a BIDS URI
of the fMRIPrep mesh or T1w image. Standard template volumes and fsLR CIFTI need none.
"""

from __future__ import annotations

from pathlib import Path

from templateflow.conf import TF_S3_ROOT

SURFACE_TEMPLATES = {
    "fsaverage5": ("fsaverage", "10k"),
    "fsaverage6": ("fsaverage", "41k"),
    "fsaverage": ("fsaverage", "164k"),
    "fsLR": ("fsLR", "32k"),
}
"""fMRIPrep's surface space name → TemplateFlow template and default density."""
NATIVE_VOLUMES = ("T1w", "anat")


def templateflow_sphere(template: str, hemi: str, den: str) -> str:
    """The URL of TemplateFlow's sphere of ``template`` at density ``den`` (``10k``).

    Parameters
    ----------
    template : str
        A TemplateFlow template (``fsaverage``).
    hemi : str
        ``L`` or ``R``.
    den : str
        Its density.

    Returns
    -------
    str
    """
    return f"{TF_S3_ROOT}/tpl-{template}/tpl-{template}_hemi-{hemi}_den-{den}_sphere.surf.gii"


def spatial_reference(
    space: str,
    *,
    hemi: str | None = None,
    den: str | None = None,
    subject: str | None = None,
    session: str | None = None,
    fmriprep_dir: str | Path | None = None,
    fmriprep_name: str = "fmriprep",
) -> str | None:
    """The ``SpatialReference`` of an output in ``space``, or None when the space name suffices.

    Parameters
    ----------
    space : str
        The space label of the file name (``fsaverage5``, ``fsnative``, ``fsLR``, ``T1w``...).
    hemi : {"L", "R"}, optional
        Hemisphere of a surface (GIFTI) output; None for volumes and CIFTI.
    den : str, optional
        Density label of the file name (``32k``), for template surfaces.
    subject, session : str, optional
        The participant (and session) whose own mesh or T1w image a native space refers to.
    fmriprep_dir : path-like, optional
        Where the participant's fMRIPrep outputs are, to find the mesh or image.
    fmriprep_name : str
        That dataset's name in ``DatasetLinks`` (the BIDS URI's dataset).

    Returns
    -------
    str or None
        A TemplateFlow URL, a ``bids:<fmriprep_name>:...`` URI, or None.
    """
    if hemi and space in SURFACE_TEMPLATES:
        template, default = SURFACE_TEMPLATES[space]
        return templateflow_sphere(template, hemi, den or default)
    if hemi and space == "fsnative":
        return _native(
            f"*_hemi-{hemi}_midthickness.surf.gii",
            f"hemi-{hemi}_midthickness.surf.gii",
            subject,
            session,
            fmriprep_dir,
            fmriprep_name,
        )
    if not hemi and space in NATIVE_VOLUMES:
        return _native(
            "*_desc-preproc_T1w.nii.gz",
            "desc-preproc_T1w.nii.gz",
            subject,
            session,
            fmriprep_dir,
            fmriprep_name,
        )
    return None


def _native(
    pattern: str,
    tail: str,
    subject: str | None,
    session: str | None,
    fmriprep_dir: str | Path | None,
    dataset: str,
) -> str | None:
    """A BIDS URI of the participant's own file.

    The one fMRIPrep wrote (session-specific first, then the participant's), else the name fMRIPrep gives it.
    """
    if not subject:
        return None
    root = Path(fmriprep_dir) if fmriprep_dir else None
    folders = [f"sub-{subject}/ses-{session}/anat"] if session else []
    folders.append(f"sub-{subject}/anat")
    for folder in folders:
        found = sorted(p for p in (root / folder).glob(pattern) if "_space-" not in p.name) if root else []
        if found:
            return f"bids:{dataset}:{found[0].relative_to(root).as_posix()}"
    return f"bids:{dataset}:sub-{subject}/anat/sub-{subject}_{tail}"

"""Volume maps (T1w, MNI, ...) drawn as slices with nilearn, on the participant's anatomy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import nibabel as nib
import numpy as np
from nilearn import plotting

from prfmap.report.figures import save
from prfmap.report.legends import MapStyle, draw_category_legend, draw_colour_bar, draw_colour_wheel


def to_image(values: np.ndarray, mask: np.ndarray, affine: np.ndarray) -> nib.Nifti1Image:
    """A 3-D image of (units,) in-mask values (C order), 0 outside the mask.

    Not NaN: nilearn warns on stderr about every non-finite value it draws.
    """
    volume = np.zeros(mask.shape, dtype=np.float32)
    volume[mask] = values
    return nib.Nifti1Image(volume, affine)


def find_anatomy(subject: str, space: str, fmriprep_dir: Path | None) -> Path | None:
    """The participant's preprocessed T1w from fMRIPrep in ``space``, if present."""
    if fmriprep_dir is None:
        return None
    name = space.split(":")[0]
    entity = "" if name in ("T1w", "anat") else f"_space-{name}"
    for path in sorted(
        Path(fmriprep_dir).glob(f"sub-{subject}/**/anat/sub-{subject}*_desc-preproc_T1w.nii*")
    ):
        has_space = "_space-" in path.name
        if (entity and entity in path.name) or (not entity and not has_space):
            return path
    return None


def centre_of(
    values: np.ndarray, shown: np.ndarray, mask: np.ndarray, affine: np.ndarray
) -> tuple[float, ...]:
    """World coordinates (mm) of the slices.

    The centre of the shown units weighted by ``values``, with the sagittal slice through the left
    hemisphere's shown units when there are any.
    """
    xyz = nib.affines.apply_affine(affine, np.argwhere(mask))
    if not shown.any():
        return tuple(float(c) for c in xyz.mean(axis=0))
    weights = np.clip(np.nan_to_num(values), 1e-6, None)
    centre = np.average(xyz[shown], axis=0, weights=weights[shown])
    left = shown & (xyz[:, 0] < 0)
    if left.any():
        centre[0] = np.average(xyz[left, 0], weights=weights[left])
    return tuple(float(c) for c in centre)


@dataclass(frozen=True)
class SliceView:
    """Where the maps of a volume fit are drawn: their grid, the image under them and the slices.

    The same for every map of a report, so that its slice figures line up.

    Attributes
    ----------
    mask, affine : ndarray
        Where the units lie.
    background : Nifti1Image
        The anatomy (or mean BOLD) under the maps.
    cut : tuple of float
        World coordinates of the slices (mm).
    """

    mask: np.ndarray
    affine: np.ndarray
    background: nib.Nifti1Image
    cut: tuple[float, ...]

    def image(self, values: np.ndarray) -> nib.Nifti1Image:
        """A map's (units,) in-mask values as a 3-D image on the grid (:func:`to_image`).

        Parameters
        ----------
        values : ndarray
            (units,) in-mask values.

        Returns
        -------
        Nifti1Image
        """
        return to_image(values, self.mask, self.affine)


def slices_figure(
    style: MapStyle,
    values: np.ndarray,
    view: SliceView,
    threshold_text: str,
    path: Path,
    description: str,
) -> Path:
    """Orthogonal slices of one map over the background, with its legend.

    Parameters
    ----------
    style : MapStyle
        The colour scale.
    values : ndarray
        (units,) in-mask values; NaN is not drawn.
    view : SliceView
        The grid, the background and the slices.
    threshold_text : str
        What is shown, on the legend.
    path : Path
        Output PNG.
    description : str
        Stored in the PNG's metadata.

    Returns
    -------
    Path
        ``path``.
    """
    # nilearn masks values at or below the threshold: draw the scale on [1, 2] and 0 elsewhere
    scaled = np.clip((values - style.vmin) / (style.vmax - style.vmin), 0, 1) + 1
    overlay = view.image(np.where(np.isfinite(values), scaled, 0.0))
    fig = plt.figure(figsize=(8.6, 2.9))
    display = plotting.plot_anat(
        view.background,
        display_mode="ortho",
        cut_coords=view.cut,
        figure=fig,
        axes=(0.0, 0.0, 0.78, 1.0),
        draw_cross=False,
        dim=0,
        annotate=True,
        colorbar=False,
        black_bg=True,
    )
    nearest = {"resampling_interpolation": "nearest"} if style.categories else {}  # categories never blend
    display.add_overlay(overlay, cmap=style.cmap, vmin=1.0, vmax=2.0, threshold=0.5, **nearest)
    if style.cyclic:
        draw_colour_wheel(fig.add_axes((0.8, 0.08, 0.19, 0.8)), style, ("L", "R"))
        fig.text(0.99, 0.02, threshold_text, ha="right", fontsize=8)
    elif style.categories:
        draw_category_legend(fig.add_axes((0.8, 0.05, 0.19, 0.9)), style, threshold_text)
    else:
        draw_colour_bar(fig.add_axes((0.81, 0.45, 0.17, 0.07)), style, threshold_text)
    return save(fig, path, {"Title": style.bar_label, "Description": description})

"""The per-participant HTML report: ``<output_dir>/sub-<label>.html`` and its figures.

The page opens with the comparison of the models where several were fitted (the winner and its gain
per unit, winners per eccentricity band and visual area, links to each model's section), then one
section per fit: the retinotopic maps (polar angle, eccentricity, σ and every r²-type map, on the
occipital cortex up close), the visual field, the model fit, data quality and a methods paragraph;
inputs, settings and file lists close each section, collapsed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from prfmap import __version__
from prfmap.derivatives.connective import CFFitOnDisk
from prfmap.report.comparison import ComparisonContext, ComparisonSection, comparison_links
from prfmap.report.connective import ConnectiveSection
from prfmap.report.context import ReportContext
from prfmap.report.html import render_page
from prfmap.report.section import FitSection, relative_path
from prfmap.report.section_maps import NOT_DRAWN

__all__ = ["NOT_DRAWN", "ReportContext", "relative_path", "write_participant_report"]

log = logging.getLogger(__name__)


def write_participant_report(
    output_dir: str | Path,
    subject: str,
    context: ReportContext | Sequence[ReportContext],
    comparisons: Sequence[ComparisonContext] = (),
    connective: Sequence[CFFitOnDisk] = (),
    cf_shown: tuple[float, Path | None] = (0.1, None),
) -> Path:
    """Write ``<output_dir>/sub-<label>.html`` with its figures under ``sub-<label>/figures/``.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder.
    subject : str
        Participant label, with or without ``sub-``.
    context : ReportContext or sequence of ReportContext
        One per fit (space, task, session, model) of this participant; each gets a section.
    comparisons : sequence of ComparisonContext
        The comparisons of the models fitted to the same data; each gets a section before the
        fits', linking to the sections of the models it compares.
    connective : sequence of CFFitOnDisk
        The participant's connective-field fits; each gets a section after the pRF fits'.
    cf_shown : tuple
        ``--r2-threshold`` and the fMRIPrep folder (fsnative meshes) of the connective-field sections.

    Returns
    -------
    Path
        The HTML file. Images are linked by relative paths, so the page opens from the file
        system with no network.
    """
    output_dir = Path(output_dir)
    label = subject.removeprefix("sub-")
    contexts = [context] if isinstance(context, ReportContext) else list(context)
    fig_dir = output_dir / f"sub-{label}" / "figures"
    keys = [ctx.key for ctx in contexts]
    unique = [key if keys.count(key) == 1 else f"{key}_{i + 1}" for i, key in enumerate(keys)]
    shared: dict = {}  # the runs' quality and figures that every fit of the same runs shows
    sections = [
        FitSection(
            ctx,
            fig_dir,
            f"sub-{label}/figures",
            key,
            views=not _compared_model(ctx, comparisons),
            shared=shared,
        ).build()
        for ctx, key in zip(contexts, unique, strict=True)
    ]
    compared = [
        ComparisonSection(
            comparison,
            fig_dir,
            f"sub-{label}/figures",
            comparison.key,
            comparison_links(comparison, contexts, unique),
        ).build()
        for comparison in comparisons
    ]
    cf_sections = [
        ConnectiveSection(fit, fig_dir, f"sub-{label}/figures", *cf_shown).build() for fit in connective
    ]
    command = next((ctx.command for ctx in contexts if ctx.command), None)
    about = [
        ("prfmap", __version__),
        ("Command", " ".join(command) if command else "not recorded"),
        ("Generated", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
    ]
    nav = [(s["anchor"], s["title"]) for s in compared + sections + cf_sections] + [("about", "About")]
    path = render_page(
        "participant.html.j2",
        output_dir / f"sub-{label}.html",
        title=f"prfmap: sub-{label}",
        subtitle="pRF maps, visual field, model fit, data quality and methods",
        nav=nav,
        comparisons=compared,
        sections=sections,
        connective=cf_sections,
        about=about,
    )
    log.debug("report written to %s", path)
    return path


def _compared_model(ctx: ReportContext, comparisons: Sequence[ComparisonContext]) -> bool:
    """Whether ``ctx`` is a model other than the Gaussian in one of ``comparisons``."""
    return ctx.model != "gauss" and any(comparison.matches(ctx) for comparison in comparisons)

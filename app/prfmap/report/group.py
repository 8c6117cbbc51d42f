"""The group-level HTML report: ``group.html`` with its figures under ``group/figures/``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from prfmap import __version__
from prfmap.io.atomic import write_text_atomic
from prfmap.report import figures
from prfmap.report.html import esc, figure, page, table
from prfmap.report.surface import SURFACE_MAPS, find_meshes, plot_surface_map

GROUP_LABELS = {
    "polarangle": "circular mean polar angle (deg)",
    "eccentricity": "median eccentricity (deg)",
    "sigma": "median sigma (deg)",
    "r2": "mean r²",
    "count": "participants contributing",
}


@dataclass(frozen=True)
class GroupFit:
    """One fit's group maps, as the group report takes them (plain data, no group-level types).

    Parameters
    ----------
    task, space, model : str
        The fit the participants share.
    den : str or None
        Density of the space (``32k``, ``91k``, ...).
    subjects : list of str
        Participant labels without ``sub-``.
    maps : dict
        Hemisphere → label (``polarangle``, ``eccentricity``, ``sigma``, ``r2``, ``count``) →
        (vertices,) float array; NaN where nobody contributes.
    files : list of Path
        The group maps written.
    r2_threshold : float
        A participant contributes at a vertex when its r² there is at least this.
    fov_deg : float, optional
        Width of the stimulated field.
    """

    task: str
    space: str
    den: str | None
    model: str
    subjects: list[str]
    maps: dict[str, dict[str, np.ndarray]]
    files: list[Path]
    r2_threshold: float
    fov_deg: float | None = None

    def __str__(self) -> str:
        den = f" den-{self.den}" if self.den else ""
        return f"task-{self.task} space-{self.space}{den} model-{self.model}"


def _count_histogram(count: np.ndarray, n_subjects: int, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    ax.hist(count, bins=np.arange(-0.5, n_subjects + 1.5, 1.0), color="steelblue")
    ax.set_xlabel("participants contributing")
    ax.set_ylabel("vertices")
    ax.set_xticks(range(n_subjects + 1))
    return figures.save(fig, path)


def _section(output_dir: Path, result: GroupFit, index: int) -> tuple[str, str]:
    fit = result
    anchor = f"fit{index}"
    prefix = f"task-{fit.task}_space-{fit.space}" + (f"_den-{fit.den}" if fit.den else "")
    prefix += f"_model-{fit.model}"
    fig_dir = output_dir / "group" / "figures"
    rel = "group/figures"
    count = np.concatenate([result.maps[h]["count"] for h in result.maps])
    n = len(result.subjects)
    rows = [
        ("Task", fit.task),
        ("Space", fit.space + (f" den-{fit.den}" if fit.den else "")),
        ("Model", fit.model),
        ("Participants", ", ".join(f"sub-{s}" for s in result.subjects)),
        ("r² threshold per participant", f"{result.r2_threshold:g}"),
        ("Vertices with every participant contributing", int(np.sum(count == n))),
        ("Vertices with at least one", int(np.sum(count >= 1))),
    ]
    files = "".join(f"<li><code>{esc(p.relative_to(output_dir))}</code></li>" for p in result.files)
    html = f'<section id="{anchor}"><h2>{esc(str(fit))}</h2>{table(rows)}'
    html += f"<h3>Group maps written</h3><ul>{files}</ul>"
    path = _count_histogram(count, n, fig_dir / f"group_{prefix}_count-hist.png")
    html += figure(
        f"{rel}/{path.name}",
        "participants per vertex",
        f"Vertices by the number of participants with r² ≥ {result.r2_threshold:g}.",
    )
    meshes, source = find_meshes("", fit.space, fit.den, None)
    sizes = {h: result.maps[h]["count"].size for h in result.maps}
    if meshes and all(meshes[h].n_vertices == sizes[h] for h in sizes if h in meshes):
        html += f"<h3>Group maps on the surface</h3><p>Drawn on {esc(source)}.</p>"
        half = result.fov_deg / 2 if result.fov_deg else None
        for label, caption in GROUP_LABELS.items():
            values = {
                h: np.where(result.maps[h]["count"] > 0, result.maps[h][label], np.nan) for h in result.maps
            }
            shown = np.concatenate([v[np.isfinite(v)] for v in values.values()])
            style = SURFACE_MAPS.get(label) or dict(cmap="viridis", vmin=0.0, vmax=float(n))
            vmax = float(np.percentile(shown, 98)) if shown.size else 1.0
            if half and label in ("eccentricity", "sigma"):
                vmax = half if label == "eccentricity" else min(vmax, half)
            path = fig_dir / f"group_{prefix}_surf-{label}.png"
            plot_surface_map(label, values, meshes, max(vmax, 1e-3), path, style)
            html += figure(
                f"{rel}/{path.name}",
                f"group {label}",
                f"{caption}, where at least one participant has r² ≥ {result.r2_threshold:g}.",
            )
    else:
        reason = source if not meshes else "the mesh does not match the maps' vertex count"
        html += f'<p class="note">Surface maps not drawn: {esc(reason)}.</p>'
    return html + "</section>", anchor


def write_group_report(output_dir: str | Path, results: Sequence[GroupFit]) -> Path:
    """Write ``<output_dir>/group.html`` for the group maps of the group level.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder.
    results : sequence of GroupFit
        One per shared fit.

    Returns
    -------
    Path
        The HTML file; figures are linked relatively from ``group/figures/``.
    """
    output_dir = Path(output_dir)
    parts = [_section(output_dir, r, i) for i, r in enumerate(results)]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    about = table([("prfmap", __version__), ("Generated", stamp)])
    body = "".join(html for html, _ in parts)
    body += f'<section id="about"><h2>About</h2>{about}</section>'
    nav = [(a, str(r)) for (_, a), r in zip(parts, results, strict=True)]
    nav.append(("about", "About"))
    return write_text_atomic(output_dir / "group.html", page("prfmap: group", nav, body))

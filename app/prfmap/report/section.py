"""One fit's section of the participant report: its maps, visual field, model fit, quality, methods."""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from prfmap.engine import catalog
from prfmap.report import figures
from prfmap.report.context import ReportContext
from prfmap.report.html import Figure, dict_rows
from prfmap.report.legends import is_r2
from prfmap.report.methods import methods_text
from prfmap.report.quality import RunQuality, fd_figure, run_quality
from prfmap.report.section_areas import area_results
from prfmap.report.section_maps import NOT_DRAWN, MapFigures
from prfmap.report.uncertainty import UNCERTAIN_BIT, centre_standard_error, uncertain_units

log = logging.getLogger(__name__)


def _visual_field_maps(maps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {k: np.asarray(v, dtype=np.float64) for k, v in maps.items()}
    if "x" in out and "y" in out:
        polar, eccentricity = catalog.visual_field_polar(out["x"], out["y"])
        out.setdefault("polarangle", polar)
        out.setdefault("eccentricity", eccentricity)
    return out


def relative_path(path: str | Path, bases: Sequence[Path | None]) -> str:
    """``path`` relative to the first of ``bases`` that holds it (as given otherwise).

    Parameters
    ----------
    path : str or Path
        A file.
    bases : sequence of Path or None
        Folders to try, in order (e.g. the BIDS dataset, the fMRIPrep folder's parent).

    Returns
    -------
    str
        The relative path, with forward slashes.
    """
    target = Path(path)
    for base in bases:
        if base is None:
            continue
        try:
            return target.resolve().relative_to(Path(base).resolve()).as_posix()
        except ValueError:
            continue
    return str(path)


def _median(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else None


class FitSection(MapFigures):
    """Figures and template values of one context (space, task, session).

    ``views=False`` leaves out the 3-D views of surface maps where flattened patches are drawn (the
    same maps a second time): a compared model's section beside its Gaussian's.
    """

    def __init__(
        self,
        ctx: ReportContext,
        fig_dir: Path,
        rel: str,
        key: str,
        views: bool = True,
        shared: dict[tuple[Any, ...], Any] | None = None,
    ) -> None:
        self.ctx = ctx
        self.shared = {} if shared is None else shared
        self.draw_views = views
        self.fig_dir = fig_dir
        self.rel = rel
        self.maps = _visual_field_maps(ctx.maps)
        self.r2 = self.maps.get("r2", np.full(self._n_units(), np.nan))
        # one definition of each count, used by every figure, table and sentence of the section:
        # above (r² at or above the threshold) = good (shown) + doubtful (flagged, left out)
        self.above = np.isfinite(self.r2) & (self.r2 >= ctx.r2_threshold)
        status = self.maps.get("status")
        self.doubtful = np.zeros_like(self.above)
        if status is not None:
            self.doubtful = self.above & catalog.doubtful(status)
        self.good = self.above & ~self.doubtful
        self.prefix = f"sub-{ctx.subject.removeprefix('sub-')}_{key}"
        self.anchor = key
        self.warnings = list(ctx.warnings)
        self.atlas_drawn = False
        self.atlas = None
        self.quality = [self._run_quality(run) for run in ctx.run_inputs]
        self.centre_se = self._centre_se()
        self.with_se = (  # refined units: grid-only ones have no standard error and are never flagged
            ~np.isnan(self.centre_se) & np.isfinite(self.r2) if self.centre_se is not None else None
        )
        self.uncertain = (
            uncertain_units(status, self.with_se) if ctx.stat_maps and self.with_se is not None else None
        )

    def _run_quality(self, run: Any) -> RunQuality:
        """:func:`run_quality` of ``run``, measured once for every section of the same run."""
        key = ("quality", run.name, repr(run.bold), str(run.confounds), self.ctx.dummy_scans)
        if key not in self.shared:
            self.shared[key] = run_quality(run, self.ctx.dummy_scans)
        return self.shared[key]

    def _drawn_once(self, key: tuple[Any, ...], path: Path, draw: Callable[[Path], Path | None]) -> bool:
        """``draw(path)``, or a copy of the same figure another section drew; whether there is one."""
        first = self.shared.get(key)
        if first is None and key not in self.shared:
            first = self.shared[key] = draw(path)
        elif first is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(first, path)
        return first is not None

    def _centre_se(self) -> np.ndarray | None:
        """The centre's standard error of every unit, from the context's stat maps (None without)."""
        values = centre_standard_error(self.ctx.stat_maps)
        if values is not None and values.size != self._n_units():
            self.warnings.append(
                f"{NOT_DRAWN} the centre's standard error: its maps have {values.size} units, the "
                f"parameter maps {self._n_units()}."
            )
            return None
        return values

    def _n_units(self) -> int:
        return len(next(iter(self.ctx.maps.values()))) if self.ctx.maps else 0

    def _fig(self, name: str) -> tuple[Path, str]:
        filename = f"{self.prefix}_{name}.png"
        return self.fig_dir / filename, f"{self.rel}/{filename}"

    @property
    def shown_words(self) -> str:
        """The units the figures show, in the words every figure and table uses."""
        words = f"r² ≥ {self.ctx.r2_threshold:g}"
        return f"{words}, not doubtful" if "status" in self.maps else words

    @property
    def threshold_text(self) -> str:
        """Which units the figures show, in words."""
        text = f"shown: r² ≥ {self.ctx.r2_threshold:g}"
        if "status" in self.maps:
            text += f", not flagged doubtful in the status map ({int(self.doubtful.sum())} left out)"
        return text

    def _inside(self) -> tuple[np.ndarray, str]:
        """r² with units outside the stimulated field set to NaN, and a sentence about them."""
        m, ctx = self.maps, self.ctx
        if not ctx.fov_deg or "eccentricity" not in m or "sigma" not in m:
            return self.r2, ""
        limit = ctx.fov_deg / 2
        inside = (m["eccentricity"] <= limit) & (m["sigma"] > 0) & (m["sigma"] <= limit)
        outside = int(np.sum(self.good & ~inside))
        note = (
            f" Drawn: those with eccentricity and σ up to {limit:g}° (the stimulated field); "
            f"{outside} more ({self.shown_words}) lie beyond it."
        )
        return np.where(inside, self.r2, np.nan), note

    def visual_field(self) -> list[Figure]:
        """The visual-field figures: pRF centres and sizes of the units shown."""
        ctx, m, thr = self.ctx, self.maps, self.ctx.r2_threshold
        r2, note = self._inside()
        r2 = np.where(self.good, r2, np.nan)  # the units shown, and only those
        words = self.shown_words
        shown = []
        if all(k in m for k in ("x", "y", "sigma")):
            path, src = self._fig("coverage")
            figures.visual_field_coverage(m["x"], m["y"], m["sigma"], r2, thr, ctx.fov_deg, path, shown=words)
            shown.append(
                Figure(
                    src,
                    "pRF centres (x, y in deg) coloured by r² (fraction), and the visual-field "
                    "coverage (maximum pRF, fraction)",
                    f"Left: pRF centres of the {int(self.good.sum())} units shown ({words}). Right: "
                    f"coverage, the maximum over their Gaussian pRFs; dashed: the stimulated field.{note}",
                )
            )
        if "eccentricity" in m and "sigma" in m:
            path, src = self._fig("ecc-sigma")
            _, line = figures.eccentricity_sigma(m["eccentricity"], m["sigma"], r2, thr, path, shown=words)
            fit = (
                "fitted line (r²-weighted least squares): "
                f"sigma = {line[0]:.3f} × eccentricity + {line[1]:.3f}°"
                if line
                else "too few units to fit a line"
            )
            shown.append(
                Figure(
                    src,
                    "pRF size σ (deg) against eccentricity (deg), coloured by r² (fraction)",
                    f"The {int(self.good.sum())} units shown ({words}); {fit}.{note}",
                )
            )
        return shown

    def model_fit(self) -> tuple[list[Figure], list[str]]:
        """The model-fit figures: the r² histogram and example time courses, with notes."""
        ctx = self.ctx
        path, src = self._fig("r2-hist")
        extra = {k: self.maps[k] for k in self.maps if is_r2(k) and k != "r2"}
        doubtful = int(self.doubtful.sum()) if "status" in self.maps else None
        figures.r2_histogram(self.r2, ctx.r2_threshold, path, extra, doubtful)
        shown = [
            Figure(
                src,
                "histogram of variance explained r² (fraction) over units (count)",
                f"Variance explained by the {ctx.model} model in all {int(np.isfinite(self.r2).sum())} "
                "units fitted"
                + (f", and {', '.join(extra)} on held-out data" if extra else "")
                + f"; {int(self.above.sum())} at or above the threshold {ctx.r2_threshold:g}"
                + (
                    f", {doubtful} of them flagged doubtful and left out of the other figures"
                    if doubtful
                    else ""
                )
                + ".",
            )
        ]
        if ctx.data is None or ctx.predictions is None:
            return shown, ["The fitted predictions were not kept for this fit, so no time courses are shown."]
        if not np.isfinite(self.r2).any():
            return shown, ["No unit has a finite r²."]
        path, src = self._fig("timecourses")
        _, picks = figures.timecourses(
            np.asarray(ctx.data), np.asarray(ctx.predictions), self.r2, ctx.tr, path, ctx.r2_threshold
        )
        desc = ", ".join(f"{k} unit {v}" for k, v in picks.items())
        shown.append(
            Figure(
                src,
                "BOLD (% signal change) against time (s): data and model of three units",
                f"Preprocessed data (grey) and fitted prediction (red): {desc} (the best, the median of "
                f"units with r² ≥ {ctx.r2_threshold:g}, and one at the 10th percentile of r²).",
            )
        )
        return shown, []

    def data_quality(self) -> dict[str, Any]:
        """The data-quality table and figures of the runs (tSNR, framewise displacement)."""
        header = (
            "run",
            "volumes",
            "median tSNR",
            "median tSNR, units shown",
            "mean FD (mm)",
            "max FD (mm)",
            "volumes FD > 0.5 mm",
        )
        rows, notes = [], []
        for q in self.quality:
            s = q.summary(self.good)
            rows.append(
                (
                    s["run"],
                    s["volumes"],
                    *(
                        f"{s[k]:.{d}f}" if s.get(k) is not None else "—"
                        for k, d in (("tsnr", 1), ("tsnr_good", 1), ("fd_mean", 3), ("fd_max", 3))
                    ),
                    s.get("fd_over", "—"),
                )
            )
            if q.problem:
                notes.append(f"{q.name}: {q.problem}.")
        if not self.quality:
            notes.append(
                "The runs were not passed to the report, so tSNR and framewise displacement are not shown."
            )
        path, src = self._fig("fd")
        runs = tuple((q.name, id(q)) for q in self.quality)
        fd = self._drawn_once(("fd", runs, self.ctx.tr), path, partial(fd_figure, self.quality, self.ctx.tr))
        shown = (
            [
                Figure(
                    src,
                    "framewise displacement (mm) against time (s) per run",
                    "Framewise displacement from fMRIPrep's confounds (dummy scans dropped).",
                )
            ]
            if fd
            else []
        )
        return {
            "quality_header": header,
            "quality_rows": rows,
            "quality_notes": notes,
            "quality_figures": shown,
        }

    # --- text -------------------------------------------------------------------------------------
    def lead(self) -> str:
        """The section's opening sentence: units fitted, shown and the runs."""
        ctx = self.ctx
        finite = np.isfinite(self.r2)
        text = (
            f"{int(finite.sum())} of {self._n_units()} units fitted; {int(self.above.sum())} with "
            f"r² ≥ {ctx.r2_threshold:g}"
        )
        if "status" in self.maps:
            text += f", {int(self.doubtful.sum())} of them flagged doubtful: {int(self.good.sum())} shown"
        median = _median(self.r2[self.good])
        if median is not None:
            text += f" (median r² of those shown {median:.2f}"
            for label in (k for k in self.maps if is_r2(k) and k != "r2"):
                other = _median(self.maps[label][self.good])
                if other is not None:
                    text += f", median {label} {other:.2f}"
            text += ")"
        if self.uncertain is not None:
            text += f"; {self._uncertain_text()}"
        runs = ", ".join(ctx.runs) or "runs not recorded"
        text = f"{text}. {ctx.model} model; {runs}" + (f"; TR {ctx.tr:g} s." if ctx.tr else ".")
        return text + self._retest_text()

    def _retest_text(self) -> str:
        """`` Test–retest: …`` where the two runs' separate fits were compared, else empty."""
        record = (self.ctx.extra_settings.get("variance_explained") or {}).get("TestRetest")
        if not record:
            return ""
        shares = record["Consistent"]
        prior = getattr(self.ctx.settings, "sigma_prior", None)
        return (
            f" Test–retest of the standard errors: fitted alone, the two runs' estimates agree within "
            f"their combined 95 % intervals for x {100 * shares['x']:.0f} %, y {100 * shares['y']:.0f} % "
            f"and σ {100 * shares['sigma']:.0f} % of {record['Units']} units (about 95 % if the "
            "intervals are right"
            + ("; σ at its maximum-likelihood estimate, before its prior)." if prior else ").")
        )

    def _uncertain_share(self) -> tuple[int, int, float]:
        """Units flagged uncertain, units with standard errors (refined), and the share in percent."""
        with_se = int(self.with_se.sum()) if self.with_se is not None else 0
        flagged = self.uncertain or 0
        return flagged, with_se, 100.0 * flagged / with_se if with_se else 0.0

    def _uncertain_text(self) -> str:
        """``k (p %) of the units with standard errors flagged uncertain (status bit 512)``."""
        flagged, _, share = self._uncertain_share()
        return (
            f"{flagged} ({share:.1f} %) of the units with standard errors (those refined) flagged "
            f"uncertain (status bit {UNCERTAIN_BIT})"
        )

    def details(self) -> dict[str, Any]:
        """The collapsed lists: inputs, settings, software, timings and outputs."""
        ctx = self.ctx
        bases = [ctx.dataset_dir, ctx.fmriprep_dir.parent if ctx.fmriprep_dir else None]
        rows = [
            ("Participant", f"sub-{ctx.subject.removeprefix('sub-')}"),
            ("Session", ctx.session or "—"),
            ("Task", ctx.task or "—"),
            ("Space", ctx.space + (f" (den-{ctx.den})" if ctx.den else "")),
            ("Model", ctx.model),
            ("Runs", ", ".join(ctx.runs) or "—"),
            ("Repetition time", f"{ctx.tr:g} s" if ctx.tr else "unknown"),
            ("Dummy scans dropped", ctx.dummy_scans),
            ("Units", self._n_units()),
            ("Units fitted", int(np.isfinite(self.r2).sum())),
            (f"Units with r² ≥ {ctx.r2_threshold:g}", int(self.above.sum())),
        ]
        if "status" in self.maps:
            rows.append(("Of those, flagged doubtful (left out)", int(self.doubtful.sum())))
        median = _median(self.r2[self.good])
        rows += [
            (f"Units shown ({self.shown_words})", int(self.good.sum())),
            ("Median r² of the units shown", f"{median:.3f}" if median is not None else "—"),
        ]
        if self.uncertain is not None:
            flagged, fitted, share = self._uncertain_share()
            rows.append(
                (
                    f"Units flagged uncertain (bit {UNCERTAIN_BIT})",
                    f"{flagged} of {fitted} with standard errors ({share:.1f} %)",
                )
            )
        stimulus = None
        if ctx.design is not None:
            path, src = self._fig("stimulus")
            design = np.ascontiguousarray(ctx.design)
            key = ("stimulus", design.shape, hashlib.sha256(design.tobytes()).hexdigest(), ctx.fov_deg)
            self._drawn_once(key, path, partial(figures.stimulus_montage, design, ctx.fov_deg))
            frames, height, width = np.shape(ctx.design)
            fov = f"{ctx.fov_deg:g}°" if ctx.fov_deg else "unknown"
            stimulus = Figure(
                src,
                "stimulus aperture frames in the visual field (deg)",
                f"Aperture frames evenly spaced over the {frames} frames the model saw ({height}×{width} "
                f"pixels, field of view {fov} wide, x right, y up).",
            )
        recorded = {**(ctx.settings.to_dict() if ctx.settings else {}), **ctx.extra_settings}
        timings = [(k, f"{v:.2f} s") for k, v in ctx.timings.items()]
        if "total" not in ctx.timings:
            timings.append(("total", f"{sum(ctx.timings.values()):.2f} s"))
        return {
            "summary_rows": rows,
            "stimulus": stimulus,
            "inputs": [relative_path(p, bases) for p in ctx.inputs],
            "settings_rows": dict_rows(recorded) or [("settings", "not recorded")],
            "backend_rows": dict_rows(ctx.backend) or [("backend", "unknown")],
            "timing_rows": timings,
            "outputs": list(ctx.outputs),
        }

    def build(self) -> dict[str, Any]:
        """Every value the section's template needs."""
        ctx = self.ctx
        title = " · ".join(
            x
            for x in (
                f"ses-{ctx.session}" if ctx.session else "",
                f"task-{ctx.task}" if ctx.task else "",
                f"space-{ctx.space}" + (f" den-{ctx.den}" if ctx.den else ""),
                f"model-{ctx.model}",
            )
            if x
        )
        view = {"anchor": self.anchor, "title": title, "threshold": ctx.r2_threshold}
        view.update(self.map_figures())
        view["visual_field"] = self.visual_field()
        view.update(area_results(ctx, self.maps, self._fig, self.shown_words))
        view["fit"], view["fit_notes"] = self.model_fit()
        view.update(self.data_quality())
        view["methods"], view["references"] = methods_text(
            model=ctx.model,
            settings=ctx.settings,
            backend=ctx.backend,
            preprocessing=ctx.preprocessing,
            dummy_scans=ctx.dummy_scans,
            tr=ctx.tr,
            fov_deg=ctx.fov_deg,
            maps=list(self.maps),
            atlas=self.atlas_drawn,
            uncertainty=bool(ctx.stat_maps),
        )
        view.update(self.details())
        view["lead"] = self.lead()
        view["warnings"] = self.warnings
        return view

"""prfmap-synth --bar-widths: sweep sequences of several bar widths, one after the other."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from prfmap.cli.synth import build_parser, main
from prfmap.io.bids import find_inputs
from prfmap.io.bold import load_bold
from prfmap.participant.confounds import read_confounds
from prfmap.synth.config import SynthConfig
from prfmap.synth.dataset import load_truth
from prfmap.synth.response import bar_apertures


def digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def measured_width(design: np.ndarray, frame: int, fov: float) -> float:
    """Width (deg) of the vertical bar of ``frame`` along the aperture's middle row."""
    n = design.shape[1]
    return design[frame, n // 2].sum() * fov / (n - 1)


def test_default_is_the_explicit_default_width_byte_for_byte(tmp_path):
    default_width = SynthConfig().bar_width
    assert default_width == 2.5
    assert main([str(tmp_path / "default"), "--small", "--space", "T1w", "--runs", "1"]) == 0
    argv = [str(tmp_path / "explicit"), "--small", "--space", "T1w", "--runs", "1"]
    assert main([*argv, "--bar-widths", str(default_width)]) == 0
    default = digest(tmp_path / "default")
    assert default == digest(tmp_path / "explicit")
    described = json.loads((tmp_path / "default/derivatives/prfsynth/truth.json").read_text())
    assert "bar_widths" not in described["Settings"] and "BarWidthsDeg" not in described
    assert SynthConfig(bar_widths=(default_width,)) == SynthConfig()


def test_two_widths_repeat_the_sweeps_with_the_second_width():
    one = SynthConfig(small=True)
    two = SynthConfig(small=True, bar_widths=(2.5, 5.0))
    design_one, design_two = bar_apertures(one), bar_apertures(two)
    n = design_one.shape[0]
    assert design_two.shape == (2 * n, *design_one.shape[1:])
    np.testing.assert_array_equal(design_two[:n], design_one)
    mid = one.blank_frames + one.steps_per_sweep // 2  # first sweep: a vertical bar mid-field
    pitch = one.fov_deg / (one.aperture_px - 1)
    assert abs(measured_width(design_two, mid, one.fov_deg) - 2.5) <= pitch
    assert abs(measured_width(design_two, n + mid, one.fov_deg) - 5.0) <= pitch
    assert design_two[n:].sum() > 1.8 * design_two[:n].sum()  # every bar of the second half wider
    assert not design_two[n : n + one.blank_frames].any()  # the repetition starts with its blank


def test_two_widths_lengthen_events_bold_stimulus_and_truth(tmp_path):
    out = tmp_path / "ds"
    assert main([str(out), "--small", "--space", "T1w", "--runs", "1", "--bar-widths", "2.5", "5"]) == 0
    n = 2 * bar_apertures(SynthConfig(small=True)).shape[0]
    (run,) = find_inputs(out, space="T1w")
    stim = nib.load(out / "stimuli" / "bars.nii.gz")
    assert stim.shape[-1] == n
    data, geom = load_bold(run)
    assert data.shape == (geom.n_units, n)
    assert len(read_confounds(run.confounds)) == n
    events = next(out.glob("sub-01/func/*_events.tsv")).read_text().splitlines()
    assert float(events[1].split("\t")[1]) == pytest.approx(n * 1.5)
    described = json.loads((out / "derivatives/prfsynth/truth.json").read_text())
    assert described["BarWidthsDeg"] == [2.5, 5.0]
    assert described["Settings"]["bar_widths"] == [2.5, 5.0]
    assert np.isfinite(load_truth(out)["sigma"]).any()


def test_config_validates_the_widths():
    assert SynthConfig(bar_widths=[3, 1.5]).bar_widths == (3.0, 1.5)
    assert SynthConfig(bar_widths=(3.0,)).sweep_widths == (3.0,)
    assert SynthConfig().sweep_widths == (2.5,)
    for bad in ((0.0,), (-1.0, 2.0), (2.0, 21.0), ("a",)):
        with pytest.raises(ValueError, match="bar_widths"):
            SynthConfig(bar_widths=bad)
    assert SynthConfig(fov_deg=30.0, bar_widths=(25.0,)).bar_widths == (25.0,)


def test_cli_rejects_bad_widths_on_one_line(tmp_path, capsys):
    for value, match in (
        (["0"], "'0' must be a positive number"),
        (["x"], "'x' is not a number"),
        (["2", "25"], "--bar-widths 25 exceeds the 20° field of view"),
        ([], "expected at least one argument"),
    ):
        with pytest.raises(SystemExit) as info:
            main([str(tmp_path / "x"), "--small", "--bar-widths", *value])
        assert info.value.code == 64
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
    assert "--bar-widths W [W ...]" in build_parser().format_help()

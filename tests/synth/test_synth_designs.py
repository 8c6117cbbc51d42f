"""prfmap-synth --stimulus-design: bars, bars of two widths, and an HCP-like wedge, ring and bars."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import accuracy
from prfmap.cli.run import main as prfmap
from prfmap.cli.synth import main
from prfmap.synth.config import CYCLES, SynthConfig
from prfmap.synth.response import (
    BAR_DIRECTIONS,
    bar_apertures,
    pixel_coordinates,
    stimulus_apertures,
    sweep_orders,
    wedge_ring_apertures,
)


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def quadrants(frame: np.ndarray) -> dict[str, float]:
    """Stimulated pixels per quadrant of the visual field (row 0 = top)."""
    n = frame.shape[0] // 2
    return {
        "upper right": frame[:n, n:].sum(),
        "upper left": frame[:n, :n].sum(),
        "lower left": frame[n:, :n].sum(),
        "lower right": frame[n:, n:].sum(),
    }


def test_the_default_design_is_the_explicit_bars_byte_for_byte(tmp_path):
    argv = ["--small", "--space", "T1w", "--runs", "1"]
    assert main([str(tmp_path / "default"), *argv]) == 0
    assert main([str(tmp_path / "explicit"), *argv, "--stimulus-design", "bars"]) == 0
    assert digest(tmp_path / "default") == digest(tmp_path / "explicit")
    described = json.loads((tmp_path / "default/derivatives/prfsynth/truth.json").read_text())
    assert "stimulus_design" not in described["Settings"] and "WedgeRing" not in described


def test_multiwidth_is_the_bar_sequence_of_an_eighth_then_half_the_field():
    config = SynthConfig(small=True, stimulus_design="multiwidth")
    assert config.sweep_widths == (2.5, 10.0)
    np.testing.assert_array_equal(
        stimulus_apertures(config), bar_apertures(SynthConfig(small=True, bar_widths=(2.5, 10.0)))
    )
    # explicit widths win over the design's
    assert SynthConfig(stimulus_design="multiwidth", bar_widths=(5.0,)).sweep_widths == (5.0,)


def test_the_hcp_wedge_turns_counter_clockwise_and_the_ring_expands():
    config = SynthConfig(small=True, stimulus_design="hcp")
    per_cycle = 2 * config.steps_per_sweep
    design = stimulus_apertures(config)
    wedge_ring = wedge_ring_apertures(config)
    assert design.shape[0] == wedge_ring.shape[0] + bar_apertures(config).shape[0]
    np.testing.assert_array_equal(design[wedge_ring.shape[0] :], bar_apertures(config))
    assert set(np.unique(design)) <= {0.0, 1.0}
    x, y = pixel_coordinates(config.fov_deg, config.aperture_px)
    assert not design[:, np.hypot(x, y) > config.fov_deg / 2 + 1e-9].any()  # inside the aperture
    # the wedge starts in the upper right quadrant and a quarter cycle later covers the upper left
    first, quarter = quadrants(design[0]), quadrants(design[per_cycle // 4])
    assert first["upper right"] > 0 and sum(first.values()) == first["upper right"]
    assert quarter["upper left"] > 0 and sum(quarter.values()) == quarter["upper left"]
    assert design[:per_cycle].sum(axis=0).max() == design[:per_cycle].sum(axis=0)[np.hypot(x, y) < 9].min()
    wedges, blank = CYCLES * per_cycle, config.blank_frames
    assert not design[wedges : wedges + blank].any()
    rings = design[wedges + blank : wedges + blank + per_cycle]
    ecc = np.hypot(x, y)
    mean_ecc = [float(ecc[frame > 0].mean()) for frame in rings]
    assert np.all(np.diff(mean_ecc) > 0) and mean_ecc[0] < 1.5 and mean_ecc[-1] > 8.5


def test_the_hcp_design_is_written_as_its_own_stimulus_and_fitted(tmp_path):
    """The files name the design; prfmap reads them (events, apertures) and recovers the pRFs."""
    bids, out = tmp_path / "bids", tmp_path / "out"
    argv = ["--small", "--space", "T1w", "--runs", "2", "--stimulus-design", "hcp"]
    assert main([str(bids), *argv]) == 0
    frames = stimulus_apertures(SynthConfig(small=True, stimulus_design="hcp")).shape[0]
    assert nib.load(bids / "stimuli" / "hcp.nii.gz").shape[-1] == frames
    assert not (bids / "stimuli" / "bars.nii.gz").exists()
    events = next(bids.glob("sub-01/func/*run-1_events.tsv")).read_text().splitlines()
    assert events[1].split("\t")[2:] == ["hcp", "hcp.nii.gz"]
    described = json.loads((bids / "derivatives/prfsynth/truth.json").read_text())
    assert described["Settings"]["stimulus_design"] == "hcp" and "wedge" in described["WedgeRing"]
    assert "wedge, a ring and bar sweeps" in (bids / "README").read_text()
    work = tmp_path / "work"
    assert prfmap([str(bids), str(out), "participant", "--no-report", "--work-dir", str(work)]) == 0
    acc = accuracy(bids, out)
    assert acc["fitted"] >= 0.95 and acc["centre"] <= 0.4 and acc["sigma"] <= 0.35, acc


def test_an_unknown_design_is_refused_on_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path / "x"), "--small", "--stimulus-design", "rings"])
    assert info.value.code == 64
    err = capsys.readouterr().err
    assert "invalid choice: 'rings'" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="stimulus_design must be one of"):
        SynthConfig(stimulus_design="rings")


def test_shuffled_runs_sweep_the_same_bars_in_their_own_order(tmp_path):
    """``--sweep-order shuffled``: run 2 has its own aperture file, the same sweeps in another order;
    prfmap fits the two runs (different apertures), and the folds give the test–retest check."""
    bids, out = tmp_path / "bids", tmp_path / "out"
    argv = ["--small", "--space", "T1w", "--runs", "2", "--sweep-order", "shuffled"]
    assert main([str(bids), *argv]) == 0
    config = SynthConfig(small=True, runs=2, sweep_order="shuffled")
    orders = sweep_orders(config)
    assert orders[0] == BAR_DIRECTIONS and sorted(orders[1]) == sorted(BAR_DIRECTIONS) != list(orders[1])
    first = nib.load(bids / "stimuli" / "bars.nii.gz").get_fdata()
    second = nib.load(bids / "stimuli" / "bars_order-2.nii.gz").get_fdata()
    assert first.shape == second.shape and first.sum() == second.sum() and (first != second).any()
    events = next(bids.glob("sub-01/func/*run-2_events.tsv")).read_text().splitlines()
    assert events[1].split("\t")[2:] == ["bars", "bars_order-2.nii.gz"]
    described = json.loads((bids / "derivatives/prfsynth/truth.json").read_text())
    assert described["Settings"]["sweep_order"] == "shuffled"
    same = SynthConfig(small=True, runs=2)
    assert sweep_orders(same) == [BAR_DIRECTIONS, BAR_DIRECTIONS] and same.run_stimulus_name(2) == "bars"
    work = tmp_path / "work"
    assert prfmap([str(bids), str(out), "participant", "--no-report", "--work-dir", str(work)]) == 0
    acc = accuracy(bids, out)
    assert acc["fitted"] >= 0.95 and acc["centre"] <= 0.4, acc
    sidecar = json.loads(next(out.glob("sub-01/func/*_desc-x_boldmap.json")).read_text())
    assert sidecar["VarianceExplained"]["TestRetest"]["Units"] > 50

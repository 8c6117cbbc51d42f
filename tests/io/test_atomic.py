"""A process killed while writing leaves the previous file or none, never a truncated one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import chunked_env

# Each writer runs in a child whose os.replace SIGKILLs it: the bytes are written, the rename never
# happens, exactly as when the machine dies between the two.
CHILD = r"""
import os, signal, sys, json
from pathlib import Path
import numpy as np
out = Path(sys.argv[1]); which = sys.argv[2]
real_replace = os.replace
os.replace = os.link = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if which == "nifti":
    import nibabel as nib
    from prfmap.io.geometry import VolumeGeometry
    mask = np.ones((4, 3, 2), bool)
    VolumeGeometry(mask=mask, affine=np.eye(4), header=nib.Nifti1Header()).write_maps(
        {"x": np.full(24, 7, np.float32)}, lambda hemi: out / "map.nii.gz")
elif which == "gifti":
    from prfmap.io.geometry import GiftiGeometry
    GiftiGeometry(hemis={"L": 10, "R": 14}).write_maps(
        {"x": np.full(24, 7, np.float32)}, lambda hemi: out / f"hemi-{hemi}.func.gii")
elif which == "sidecar":
    from prfmap.io.atomic import write_json_atomic
    write_json_atomic(out / "map.json", {"new": list(range(10000))})
elif which == "description":
    from prfmap.derivatives import write_dataset_files
    write_dataset_files(out, [{"URL": "bids:raw:"}])
elif which == "report":
    from prfmap.io.atomic import write_text_atomic
    write_text_atomic(out / "sub-01.html", "<html>" + "x" * 100000 + "</html>")
elif which == "figure":
    import matplotlib.pyplot as plt
    from prfmap.report.figures import save
    save(plt.figure(), out / "figure.png")
elif which == "checkpoint":
    from prfmap.participant.checkpoint import _save_chunk
    _save_chunk(out / "chunk-00000-of-00001.npz", {"r2": np.ones(1000)}, {"units": [0, 1000]})
"""

OLD = {
    "nifti": ["map.nii.gz"],
    "gifti": ["hemi-L.func.gii"],
    "sidecar": ["map.json"],
    "description": [],
    "report": ["sub-01.html"],
    "figure": ["figure.png"],
    "checkpoint": ["chunk-00000-of-00001.npz"],
}


def _old_content(path: Path) -> bytes:
    if path.name.endswith(".nii.gz"):
        nib.save(nib.Nifti1Image(np.zeros((4, 3, 2), np.float32), np.eye(4)), path)
    elif path.name.endswith(".func.gii"):
        darray = nib.gifti.GiftiDataArray(np.zeros(10, np.float32), intent="NIFTI_INTENT_ESTIMATE")
        nib.save(nib.GiftiImage(darrays=[darray]), path)
    else:
        path.write_bytes(b"old complete content\n")
    return path.read_bytes()


@pytest.mark.parametrize("which", sorted(OLD))
def test_kill_between_write_and_rename_keeps_old_file(tmp_path: Path, which: str) -> None:
    out = tmp_path / "out ü"
    out.mkdir()
    before = {name: _old_content(out / name) for name in OLD[which]}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), which],
        env=chunked_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    visible = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}
    assert visible == before, "a file changed or appeared although its write never completed"
    assert all(p.name.startswith(".") for p in out.iterdir() if p.name not in before)


def test_dataset_files_are_never_truncated_under_a_race(tmp_path: Path) -> None:
    """write_dataset_files called by many processes at once: one complete description survives."""
    code = (
        "import sys; from prfmap.derivatives import write_dataset_files;"
        "write_dataset_files(sys.argv[1], [{'URL': 'bids:raw:'}])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=chunked_env())  # noqa: S603
        for _ in range(6)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    assert json.loads((tmp_path / "dataset_description.json").read_text())["DatasetType"] == "derivative"
    assert (tmp_path / ".bidsignore").read_text().endswith("\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bidsignore", "dataset_description.json"]

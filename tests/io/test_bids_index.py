"""The pybids index kept under --work-dir is reused exactly while no file of the dataset changes."""

from __future__ import annotations

import os

from prfmap.io import bids_index
from prfmap.io.bids import find_inputs


def test_the_key_follows_every_file_of_the_roots(dataset):
    roots = [dataset.root, dataset.fmriprep]
    key = bids_index.dataset_key(roots)
    assert bids_index.dataset_key(roots) == key
    sidecar = next(dataset.fmriprep.rglob("*.json"))
    stat = sidecar.stat()
    os.utime(sidecar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    assert bids_index.dataset_key(roots) != key
    key = bids_index.dataset_key(roots)
    (dataset.root / "sub-01" / "new_file.txt").write_text("x")
    assert bids_index.dataset_key(roots) != key
    key, raw = bids_index.dataset_key(roots), bids_index.dataset_key([dataset.root])
    # not part of the raw root for pybids: its derivatives/ (a root of its own) and hidden folders
    (dataset.root / "derivatives" / "prfmap").mkdir()
    (dataset.root / "derivatives" / "prfmap" / "map.json").write_text("{}")
    (dataset.root / ".prfmap-work").mkdir()
    (dataset.root / ".prfmap-work" / "chunk").write_text("x")
    assert bids_index.dataset_key([dataset.root]) == raw
    assert bids_index.dataset_key(roots) == key
    assert bids_index.dataset_key(roots, "validate=True") != key


def test_keep_and_restore(tmp_path):
    database = tmp_path / "db"
    database.mkdir()
    (database / "layout_index.sqlite").write_bytes(b"index")
    assert not bids_index.restore(tmp_path / "work" / "bids_db", "abc", tmp_path / "copy")
    bids_index.keep(tmp_path / "work" / "bids_db", "abc", database)
    bids_index.keep(tmp_path / "work" / "bids_db", "abc", database)  # kept once
    assert bids_index.restore(tmp_path / "work" / "bids_db", "abc", tmp_path / "copy")
    assert (tmp_path / "copy" / "layout_index.sqlite").read_bytes() == b"index"
    assert not (tmp_path / "copy" / bids_index.COMPLETE).exists()
    assert [p.name for p in (tmp_path / "work" / "bids_db").iterdir()] == ["index-abc"]


def test_a_second_query_loads_the_index_and_finds_the_same_runs(dataset, tmp_path, monkeypatch):
    work = tmp_path / "work"
    first = find_inputs(dataset.root, tmp_path / "out", work_dir=work)
    restored = []
    original = bids_index.restore

    def spy(*args):
        restored.append(original(*args))
        return restored[-1]

    monkeypatch.setattr(bids_index, "restore", spy)
    assert find_inputs(dataset.root, tmp_path / "out", work_dir=work) == first
    assert restored == [True]
    sidecar = next(dataset.fmriprep.rglob("*.json"))
    os.utime(sidecar, ns=(sidecar.stat().st_atime_ns, sidecar.stat().st_mtime_ns + 10**9))
    find_inputs(dataset.root, tmp_path / "out", work_dir=work)
    assert restored == [True, False]  # the dataset changed: indexed again

"""prfmap-docker against a fake Docker client: mounts, GPUs, user, image, command, exit code."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from docker.errors import APIError, DockerException, ImageNotFound
from docker.types import DeviceRequest, Mount

from prfmap_docker import __version__
from prfmap_docker.cli import main, split_arguments
from prfmap_docker.command import LauncherError, translate
from prfmap_docker.runner import device_requests


class FakeContainer:
    def __init__(self, logs: list[bytes], status: int) -> None:
        self._logs = logs
        self._status = status
        self.removed = False
        self.stopped = False

    def logs(self, **kwargs):
        assert kwargs["stream"] and kwargs["follow"]
        yield from self._logs

    def wait(self):
        return {"StatusCode": self._status, "Error": None}

    def stop(self, timeout=None):
        self.stopped = True

    def remove(self, force=False):
        self.removed = True


class FakeImages:
    def __init__(self, present: set[str], pullable: set[str]) -> None:
        self.present = set(present)
        self.pullable = pullable
        self.pulled: list[str] = []

    def get(self, name):
        if name not in self.present:
            raise ImageNotFound(f"No such image: {name}")
        return name

    def pull(self, name):
        if name not in self.pullable:
            raise APIError(f"pull access denied for {name}")
        self.pulled.append(name)
        self.present.add(name)
        return name


class FakeContainers:
    def __init__(self, container: FakeContainer) -> None:
        self.container = container
        self.calls: list[tuple[str, dict]] = []

    def run(self, image, **kwargs):
        self.calls.append((image, kwargs))
        return self.container


class FakeClient:
    def __init__(self, *, present=(), pullable=(), logs=(b"fitting\n", b"done\n"), status=0):
        self.images = FakeImages(set(present), set(pullable))
        self.container = FakeContainer(list(logs), status)
        self.containers = FakeContainers(self.container)

    def ping(self):
        return True


@pytest.fixture
def dataset(tmp_path):
    (tmp_path / "bids").mkdir()
    (tmp_path / "fmriprep").mkdir()
    (tmp_path / "stim").mkdir()
    (tmp_path / "stim" / "bars.nii.gz").write_bytes(b"x")
    (tmp_path / "stim" / "bars.json").write_text("{}")
    (tmp_path / "filter.json").write_text("{}")
    return tmp_path


def launch(argv, client, log=None):
    log = log if log is not None else io.BytesIO()
    code = main([str(a) for a in argv], client_factory=lambda: client, log=log)
    return code, log


def the_run(client):
    assert len(client.containers.calls) == 1
    return client.containers.calls[0]


def mounts_of(kwargs) -> dict[str, Mount]:
    return {m["Target"]: m for m in kwargs["mounts"]}


def test_mounts_command_user_image_and_exit_code(dataset):
    local = f"prfmap:{__version__}-jax"
    client = FakeClient(present={local}, status=0)
    code, log = launch(
        [
            dataset / "bids",
            dataset / "out",
            "participant",
            "--participant-label",
            "01",
            "02",
            "--derivatives",
            f"fp={dataset / 'fmriprep'}",
            "--stimulus",
            dataset / "stim" / "bars.nii.gz",
            "--bids-filter-file",
            dataset / "filter.json",
            "-w",
            dataset / "work",
            "--bids-database-dir",
            dataset / "bids_index",
            "--model",
            "css",
            "-vv",
        ],
        client,
    )
    assert code == 0
    assert log.getvalue() == b"fitting\ndone\n"
    image, kwargs = the_run(client)
    assert image == local
    mounts = mounts_of(kwargs)
    expected = {
        "/data": (dataset / "bids", True),
        "/out": (dataset / "out", False),
        "/derivatives/fp": (dataset / "fmriprep", True),
        "/inputs/stimulus": (dataset / "stim", True),
        "/inputs/bids-filter-file": (dataset, True),
        "/work": (dataset / "work", False),
        "/bids_db": (dataset / "bids_index", False),
    }
    assert set(mounts) == set(expected)
    for target, (source, read_only) in expected.items():
        assert mounts[target]["Source"] == str(source)
        assert mounts[target]["Type"] == "bind"
        assert mounts[target]["ReadOnly"] is read_only
    assert kwargs["command"] == [
        "/data",
        "/out",
        "participant",
        "--participant-label",
        "01",
        "02",
        "--derivatives",
        "fp=/derivatives/fp",
        "--stimulus",
        "/inputs/stimulus/bars.nii.gz",
        "--bids-filter-file",
        "/inputs/bids-filter-file/filter.json",
        "--work-dir",
        "/work",
        "--bids-database-dir",
        "/bids_db",
        "--model",
        "css",
        "-vv",
    ]
    assert kwargs["user"] == f"{os.getuid()}:{os.getgid()}"
    assert kwargs["device_requests"] is None
    assert kwargs["detach"] is True
    assert (dataset / "out").is_dir() and (dataset / "work").is_dir()
    assert client.container.removed


def test_exit_code_is_the_containers(dataset):
    client = FakeClient(
        present={f"prfmap/prfmap:{__version__}-jax"}, status=65, logs=[b"prfmap: error: bad aperture\n"]
    )
    code, log = launch([dataset / "bids", dataset / "out", "participant"], client)
    assert code == 65
    assert b"bad aperture" in log.getvalue()
    assert client.container.removed


@pytest.mark.parametrize("backend", ["jax", "torch", "tensorflow"])
def test_backend_picks_the_image_and_is_passed_on(dataset, backend):
    published = f"prfmap/prfmap:{__version__}-{backend}"
    client = FakeClient(present={published, f"prfmap:{__version__}-{backend}"})
    code, _ = launch([dataset / "bids", dataset / "out", "participant", "--backend", backend], client)
    image, kwargs = the_run(client)
    assert code == 0 and image == published
    assert kwargs["command"][-2:] == ["--backend", backend]


def test_missing_image_is_pulled_and_unpullable_one_is_one_line(dataset, capsys):
    published = f"prfmap/prfmap:{__version__}-torch"
    client = FakeClient(pullable={published})
    code, log = launch([dataset / "bids", dataset / "out", "participant", "--backend", "torch"], client)
    assert code == 0 and client.images.pulled == [published]
    assert f"pulling {published}".encode() in log.getvalue()

    client = FakeClient()
    code, _ = launch([dataset / "bids", dataset / "out", "participant"], client)
    err = capsys.readouterr().err
    assert code == 1 and not client.containers.calls
    assert err.count("\n") == 1 and "docker buildx bake" in err


def test_explicit_image(dataset):
    client = FakeClient(present={"registry.example/prfmap:dev"})
    code, _ = launch(
        ["--image", "registry.example/prfmap:dev", dataset / "bids", dataset / "out", "group"], client
    )
    image, kwargs = the_run(client)
    assert code == 0 and image == "registry.example/prfmap:dev"
    assert kwargs["command"] == ["/data", "/out", "group"]


@pytest.mark.parametrize(
    ("gpus", "count", "ids"),
    [("all", -1, []), ("2", 2, []), ("device=0,2", 0, ["0", "2"]), ('"device=1"', 0, ["1"])],
)
def test_gpu_device_requests(dataset, gpus, count, ids):
    client = FakeClient(present={f"prfmap/prfmap:{__version__}-jax"})
    code, _ = launch(["--gpus", gpus, dataset / "bids", dataset / "out", "participant"], client)
    _, kwargs = the_run(client)
    assert code == 0
    (request,) = kwargs["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert request.count == count
    assert request.device_ids == ids
    assert request.capabilities == [["gpu"]]


def test_bad_gpus_value_is_a_usage_error():
    with pytest.raises(LauncherError) as err:
        device_requests("some")
    assert err.value.exit_code == 64


def test_user_read_only_and_env(dataset):
    client = FakeClient(present={f"prfmap/prfmap:{__version__}-jax"})
    code, _ = launch(
        [
            "--user",
            "1234:5678",
            "--read-only",
            "-e",
            "OMP_NUM_THREADS=2",
            dataset / "bids",
            dataset / "out",
            "participant",
        ],
        client,
    )
    _, kwargs = the_run(client)
    assert code == 0
    assert kwargs["user"] == "1234:5678"
    assert kwargs["read_only"] is True
    assert kwargs["tmpfs"] == {"/tmp": "rw,exec,nosuid,nodev"}
    assert kwargs["environment"] == {"OMP_NUM_THREADS": "2"}


def test_version_and_help_need_no_positionals(dataset):
    client = FakeClient(present={f"prfmap/prfmap:{__version__}-jax"})
    code, _ = launch(["--version"], client)
    _, kwargs = the_run(client)
    assert code == 0 and kwargs["command"] == ["--version"] and kwargs["mounts"] == []


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["{bids}", "{out}"], 64, "expected bids_dir output_dir analysis_level"),
        (["{bids}", "{out}", "participant", "extra"], 64, "unexpected 'extra'"),
        (["{bids}", "{out}", "participant", "--frobnicate"], 64, "unrecognized prfmap option"),
        (["{bids}", "{out}", "participant", "--model"], 64, "--model expects one or more"),
        (["{bids}", "{out}", "participant", "--refine"], 64, "--refine expects one value"),
        (["{bids}", "{out}", "participant", "--task"], 64, "--task expects one or more"),
        (["{bids}", "{out}", "participant", "--fit-hrf=yes"], 64, "takes no value"),
        (["{tmp}/nope", "{out}", "participant"], 66, "bids_dir"),
        (["{bids}", "{out}", "participant", "--stimulus", "{tmp}/nope.npy"], 66, "--stimulus"),
        (["{bids}", "{out}", "participant", "--derivatives", "x={tmp}/nope"], 66, "--derivatives"),
        (["--gpus"], 64, "--gpus expects one value"),
        (["-e", "NOEQUALS", "{bids}", "{out}", "participant"], 64, "NAME=VALUE"),
    ],
)
def test_usage_errors_are_one_line_and_touch_nothing(dataset, capsys, argv, code, words):
    client = FakeClient(present={f"prfmap/prfmap:{__version__}-jax"})
    fill = {"bids": dataset / "bids", "out": dataset / "out", "tmp": dataset}
    got, _ = launch([a.format(**fill) for a in argv], client)
    err = capsys.readouterr().err
    assert got == code
    assert err.startswith("prfmap-docker: error: ") and err.count("\n") == 1
    assert words in err
    assert not client.containers.calls
    assert not (dataset / "out").exists()


def test_abbreviations_and_attached_values_like_argparse(dataset):
    plan = translate(
        [
            str(dataset / "bids"),
            str(dataset / "out"),
            "participant",
            "--particip",
            "01",
            f"--work-dir={dataset / 'w'}",
            f"-w{dataset / 'w2'}",
            "--derivatives",
            str(dataset / "fmriprep"),
            "--high-pass-hz",
            "-0.5",
        ]
    )
    assert plan.command[3:] == [
        "--participant-label",
        "01",
        "--work-dir",
        "/work",
        "--work-dir",
        "/work-2",
        "--derivatives",
        "fmriprep=/derivatives/fmriprep",
        "--high-pass-hz",
        "-0.5",
    ]
    with pytest.raises(LauncherError, match="ambiguous"):
        translate([str(dataset / "bids"), "o", "participant", "--s", "x"])


def test_launcher_options_are_split_from_prfmaps():
    ours, theirs = split_arguments(
        ["--gpus", "all", "b", "o", "participant", "--image=x", "--task", "prf", "--dry-run"]
    )
    assert ours == ["--gpus", "all", "--image=x", "--dry-run"]
    assert theirs == ["b", "o", "participant", "--task", "prf"]


def test_dry_run_prints_docker_run_without_a_daemon(dataset, capsys):
    def no_client():
        raise AssertionError("a dry run must not contact Docker")

    code = main(
        ["--dry-run", "--gpus", "all", str(dataset / "bids"), str(dataset / "out"), "participant"],
        client_factory=no_client,
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("docker run --rm --init -v ")
    assert f"{dataset / 'bids'}:/data:ro" in out and "--gpus all" in out
    assert f"prfmap/prfmap:{__version__}-jax /data /out participant" in out


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_without_a_daemon_is_the_launchers_and_says_where_prfmaps_is(capsys, flag):
    def no_daemon():
        raise DockerException("Error while fetching server API version")

    code = main([flag], client_factory=no_daemon)
    out, err = capsys.readouterr()
    assert code == 0
    assert out.startswith("usage: prfmap-docker [launcher options]") and "--launcher-help" in out
    assert err.count("\n") == 1 and "no Docker daemon answers" in err and "docs/cli.md" in err


def test_no_daemon_is_one_line_and_non_zero(dataset, tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    script = Path(sys.executable).parent / "prfmap-docker"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "prfmap_docker"]
    result = subprocess.run(
        [*command, str(dataset / "bids"), str(dataset / "out"), "participant"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 69
    assert result.stderr.startswith("prfmap-docker: error: cannot reach the Docker daemon")
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_output_folder_that_cannot_be_created(dataset, capsys):
    (dataset / "file").write_text("not a folder")
    client = FakeClient(present={f"prfmap/prfmap:{__version__}-jax"})
    code, _ = launch([dataset / "bids", dataset / "file" / "out", "participant"], client)
    err = capsys.readouterr().err
    assert code == 73 and err.count("\n") == 1 and "cannot create" in err
    assert not client.containers.calls

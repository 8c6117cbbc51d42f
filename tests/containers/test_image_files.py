"""The Dockerfile, bake file, pinned requirements and build scripts agree with the project."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import BACKENDS, REPO, image_script

constraints = image_script("constraints")
fetch_templateflow = image_script("fetch_templateflow")

BASE_IMAGES = {
    "jax": r"nvidia/cuda:12\.\d+\.\d+-[a-z-]*ubuntu\d\d\.\d\d",
    "torch": r"pytorch/pytorch:\d+\.\d+\.\d+-cuda12\.\d+-cudnn\d+-runtime",
    "tensorflow": r"tensorflow/tensorflow:\d+\.\d+\.\d+-gpu",
}


def dockerfile_text() -> str:
    return (REPO / "Dockerfile").read_text()


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_has_a_pinned_official_base(docker_recipe, backend):
    stage = docker_recipe[f"base-{backend}"]
    assert re.fullmatch(BASE_IMAGES[backend], stage.fromHeader.strip())


def test_every_from_is_pinned_or_a_stage(docker_recipe):
    for name, stage in docker_recipe.items():
        image = stage.fromHeader.strip()
        if image.startswith("$") or "${" in image:
            continue
        assert re.search(r":\d+\.\d+", image), f"stage {name}: {image} is not pinned"


def test_runtime_stage_defaults_to_jax_and_selects_by_backend():
    text = dockerfile_text()
    assert re.search(r"^ARG BACKEND=jax$", text, re.MULTILINE)
    assert re.search(r"^ARG BASE_STAGE=base-\$\{BACKEND\}$", text, re.MULTILINE)
    assert re.search(r"^FROM \$\{BASE_STAGE\} AS runtime$", text, re.MULTILINE)
    assert text.rstrip().splitlines()[-1].startswith("CMD"), "the runtime stage must be last"


def test_runtime_entrypoint_user_and_labels(docker_recipe, version):
    runtime = docker_recipe["runtime"]
    assert runtime.entrypoint == ["prfmap"]
    text = dockerfile_text()
    user = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user and user[-1].split(":")[0].isdigit() and user[-1].split(":")[0] != "0"
    labels = " ".join(part for label in runtime.labels for part in label)
    for key in ("version", "source", "revision", "licenses", "title"):
        assert f"org.opencontainers.image.{key}=" in labels
    assert 'io.github.prfmap.backend="${BACKEND}"' in labels
    assert f"ARG PRFMAP_VERSION={version}\n" in text
    assert "> /version" in text and 'test "$(cat /version)" = "${PRFMAP_VERSION}"' in text


def test_caches_are_under_tmp_and_jax_shares_the_gpu(runtime_env):
    env = runtime_env
    for key in (
        "XDG_CACHE_HOME",
        "MPLCONFIGDIR",
        "KERAS_HOME",
        "NILEARN_DATA",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "CUDA_CACHE_PATH",
    ):
        assert env[key].startswith("/tmp/"), key
    assert env["TEMPLATEFLOW_HOME"] == "/opt/templateflow"
    assert env["TEMPLATEFLOW_AUTOUPDATE"] == "0"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["KERAS_BACKEND"] == "${BACKEND}"
    assert env["PATH"].startswith("/opt/prfmap/bin:")
    assert "&& rm -rf /tmp/.cache\n" in dockerfile_text(), "build-time caches would be root's"


def test_bake_builds_every_backend_with_versioned_tags(version):
    bake = json.loads((REPO / "docker" / "docker-bake.json").read_text())
    assert bake["variable"]["PRFMAP_VERSION"]["default"] == version
    assert bake["variable"]["PRFMAP_REPO"]["default"] == "prfmap"
    assert sorted(bake["group"]["default"]["targets"]) == sorted(BACKENDS)
    for backend in BACKENDS:
        target = bake["target"][backend]
        assert target["args"]["BACKEND"] == backend
        assert target["args"]["PRFMAP_VERSION"] == "${PRFMAP_VERSION}"
        assert target["tags"] == [f"${{PRFMAP_REPO}}:${{PRFMAP_VERSION}}-{backend}"]
        assert (REPO / target["context"] / target["dockerfile"]).resolve() == REPO / "Dockerfile"


def _requirements(name: str) -> dict[str, str]:
    pins = {}
    for line in (REPO / "docker" / "requirements" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[a-z0-9,]+\])?==([0-9][0-9A-Za-z.+-]*)", line)
            assert match, f"{name}: {line!r} is not an exact pin"
            pins[constraints.canonical(match.group(1))] = match.group(3)
    return pins


def test_every_project_dependency_is_pinned_for_the_images():
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL).group(1)
    deps = {
        constraints.canonical(re.match(r'\s*"([A-Za-z0-9_.-]+)', d).group(1))
        for d in block.strip().splitlines()
        if d.strip()
    }
    pinned = _requirements("common.txt")
    numpy_from = {"jax": _requirements("jax.txt")}
    missing = deps - set(pinned) - {"numpy"}
    assert not missing, f"pin these in docker/requirements/common.txt: {sorted(missing)}"
    assert "numpy" in numpy_from["jax"], "the JAX image has no framework base to take NumPy from"
    assert "jax" in _requirements("jax.txt")
    assert "jax[cuda12]" in (REPO / "docker" / "requirements" / "jax.txt").read_text()
    for backend in BACKENDS:
        _requirements(f"{backend}.txt")


def test_dockerignore_lets_through_what_the_build_reads():
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negate = pattern.startswith("!")
            pat = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
                keep = negate
        return keep

    text = dockerfile_text()
    used = re.findall(r"COPY (?!--from)(.+?) \S+$", text, re.MULTILINE)
    used = [p for line in used for p in line.split()] + re.findall(
        r"--mount=type=bind,source=([\w/.-]+),", text
    )
    assert "app" in used and "docker/image" in used
    for path in used:
        assert (REPO / path).exists(), path
        assert included(path), f"{path} is excluded by .dockerignore"
    for heavy in (".venv/bin/python", ".git/HEAD", "tests/containers/conftest.py"):
        assert not included(heavy), f"{heavy} would be sent to the daemon"


def test_constraints_hold_the_base_except_what_we_pin(tmp_path):
    req = tmp_path / "req.txt"
    req.write_text("# comment\nKeras==3.15.1  # pinned\njax[cuda12]==0.10.2\n--index-url x\n")
    assert constraints.pinned_names([req]) == {"keras", "jax"}
    held = constraints.constraints({"keras": "3.0", "Torch": "2.13.0", "ml_dtypes": "0.5"}, {"keras"})
    assert held == ["ml-dtypes==0.5", "torch==2.13.0"]
    out = subprocess.run(
        [sys.executable, str(REPO / "docker/image/constraints.py"), str(req)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    import numpy

    assert f"numpy=={numpy.__version__}" in out
    assert not any(line.startswith(("keras==", "jax==")) for line in out)


def _skeleton() -> list[str]:
    import templateflow

    skel = Path(templateflow.__file__).parent / "conf" / "templateflow-skel.zip"
    with zipfile.ZipFile(skel) as archive:
        return [Path(n).name for n in archive.namelist() if not n.endswith("/")]


def _matches(names: list[str], query: dict) -> list[str]:
    out = []
    for name in names:
        if not name.startswith(f"tpl-{query['template']}_"):
            continue
        if not name.endswith(f"_{query['suffix']}{query['extension']}"):
            continue
        entities = dict(e.split("-", 1) for e in name.split("_")[1:-1])
        if entities.get("hemi") != query["hemi"] or entities.get("den") != query["density"]:
            continue
        if "desc" in entities or "space" in entities:
            continue
        out.append(name)
    return out


def test_each_prefetch_query_names_one_templateflow_file():
    names = _skeleton()
    queries = fetch_templateflow.queries()
    assert len(queries) == 2 * (
        sum(map(len, fetch_templateflow.SURFACES.values()))
        + sum(map(len, fetch_templateflow.SHAPES.values()))
    )
    for query in queries:
        assert len(_matches(names, query)) == 1, query


def test_prefetch_covers_the_surfaces_the_reports_look_for():
    surface = pytest.importorskip("prfmap.report.meshes")  # where the report looks for meshes
    names = _skeleton()
    wanted = set(surface.TEMPLATE_DENSITY.values())
    wanted |= {("fsLR", den) for den in getattr(surface, "CIFTI_MESH_DENSITY", {}).values()}
    checked = 0
    for template, density in sorted(wanted):
        fetched = fetch_templateflow.SURFACES.get((template, density), ())
        for hemi in fetch_templateflow.HEMIS:
            first = next(
                (
                    kind
                    for kind in surface.SURFACE_KINDS
                    if _matches(
                        names,
                        dict(
                            template=template, hemi=hemi, density=density, suffix=kind, extension=".surf.gii"
                        ),
                    )
                ),
                None,
            )
            if first is None:
                continue  # TemplateFlow has no such mesh (fsLR 59k): nothing to pre-fetch
            assert first in fetched, (template, density, hemi, first)
            checked += 1
    assert checked >= 8


def test_constraints_pin_everything_else_from_the_lock(tmp_path):
    """Base packages are held, the lock pins the rest, direct pins win; --verify names what is not pinned."""
    req, lock = tmp_path / "req.txt", tmp_path / "lock.txt"
    req.write_text("keras==3.15.1\n")
    lock.write_text(
        "# lock\nkeras==3.0.0\nNumPy==2.4.6\nscipy==1.17.1\nrich==15.0.0 ; python_version >= '3'\n"
    )
    lines = constraints.constraints(
        {"numpy": "2.1.0", "torch": "2.13.0"}, {"keras"}, constraints.pins([lock])
    )
    assert lines == ["numpy==2.1.0", "rich==15.0.0", "scipy==1.17.1", "torch==2.13.0"]
    expected = constraints.pins([req]) | dict(line.split("==") for line in lines)
    installed = {"keras": "3.15.1", "numpy": "2.1.0", "scipy": "1.17.1", "prfmap": "0.1.0"}
    assert constraints.unpinned(installed, expected) == []
    wrong = constraints.unpinned({**installed, "scipy": "1.16.0", "tqdm": "4.0"}, expected)
    assert wrong == ["scipy==1.16.0 (pinned 1.17.1)", "tqdm==4.0 (not pinned)"]
    out = subprocess.run(
        [sys.executable, str(REPO / "docker/image/constraints.py"), "--lock", str(lock), str(req)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "rich==15.0.0" in out and not any(line.startswith("keras==") for line in out)
    check = subprocess.run(
        [sys.executable, str(REPO / "docker/image/constraints.py"), "--verify", str(req)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1 and "not pinned" in check.stderr and "make docker-lock" in check.stderr


def test_lock_agrees_with_the_direct_pins_and_the_dockerfile_uses_it():
    lock = constraints.pins([REPO / "docker" / "requirements" / "lock.txt"])
    direct = {**_requirements("common.txt"), **_requirements("jax.txt")}
    assert {n: lock.get(n) for n in direct} == direct
    assert {"setuptools", "wheel", "h5py", "pybids", "docopt"} <= set(lock)
    text = dockerfile_text()
    assert text.count("--verify") == 2 and text.count("--lock") == 2
    assert "--no-build-isolation" in text
    makefile = (REPO / "Makefile").read_text()
    assert "docker-lock:" in makefile and "docker/requirements/lock.sh" in makefile

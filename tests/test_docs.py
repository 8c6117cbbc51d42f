"""The documentation site builds offline with no warning; its command-line page lists every option
``prfmap --help`` prints; its API page documents the engine; the README stays a short user's page
whose links resolve."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, subprocess_env

DOCS = REPO / "docs"
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
ENGINE_API = ("fit_prf", "predict", "Stimulus", "FitResult")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``sphinx-build -W`` (as ``make docs`` runs it) into a temporary folder, offline."""
    out = tmp_path_factory.mktemp("site")
    env = subprocess_env("jax") | {
        "no_proxy": "*",
        "http_proxy": "http://0.0.0.0:9",
        "https_proxy": "http://0.0.0.0:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "WARNING" not in done.stdout + done.stderr, done.stderr[-3000:]
    return out


def help_options(module: str) -> set[str]:
    """The option strings of ``python -m <module> --help``, read from its option lines."""
    env = subprocess_env("jax") | {"COLUMNS": "300"}
    text = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    options = set()
    for line in text.splitlines():
        if re.match(r"^  -", line):  # "  --name METAVAR, --other METAVAR   help text"
            spec = re.split(r"\s{2,}", line.strip())[0]
            options |= {word.split()[0] for word in spec.split(", ")}
    return options


def page_options(page: Path, section: str, before: str | None = None) -> set[str]:
    """The option strings a generated reference section of ``page`` lists (its ``<kbd>`` terms)."""
    text = page.read_text()
    text = text[text.index(f'<section id="{section}"') :]
    if before:
        text = text[: text.index(f'<section id="{before}"')]
    terms = re.findall(r"<kbd>(.*?)</kbd>", text)
    return {o for term in terms for o in OPTION.findall(html.unescape(term))}


def test_site_builds_offline_without_warnings(site: Path) -> None:
    pages = {p.stem for p in DOCS.glob("*.md")}
    built = {p.stem for p in site.glob("*.html")}
    assert pages <= built, f"pages left out of the site: {sorted(pages - built)}"
    for page in site.glob("*.html"):
        text = page.read_text()
        remote = re.findall(r'<(?:img|script|link)\b[^>]*(?:src|href)="(https?:)?//[^"]*"', text)
        assert not remote, f"{page.name} loads {remote} from the network"


def test_cli_page_lists_every_option_of_prfmap_help(site: Path) -> None:
    cli = site / "cli.html"
    printed = help_options("prfmap.cli.run")
    assert {"--participant-label", "--participant_label", "-w", "-v", "--reports-only"} <= printed
    listed = page_options(cli, "command-line-reference", before="prfmap-synth")
    # sphinx-argparse never lists argparse's own -h/--help; the page says it in words
    assert listed == printed - {"-h", "--help"}, (
        f"missing: {sorted(printed - listed - {'-h', '--help'})}; not in --help: {sorted(listed - printed)}"
    )
    assert '<code class="docutils literal notranslate"><span class="pre">--help</span>' in cli.read_text()
    synth = page_options(cli, "prfmap-synth", before="cli-prfmap-stimulus")
    assert synth == help_options("prfmap.cli.synth") - {"-h", "--help"}
    assert page_options(cli, "cli-prfmap-stimulus") == help_options("prfmap.cli.stimulus") - {"-h", "--help"}


def test_api_page_documents_the_engine(site: Path) -> None:
    text = (site / "api.html").read_text()
    for name in ENGINE_API:
        entry = re.search(
            rf'<dt class="sig sig-object py" id="prfmap\.engine\.{name}">(.*?)</dd>', text, re.S
        )
        assert entry, f"prfmap.engine.{name} is not documented"
        described = re.sub(r"<[^>]+>", " ", entry.group(1).split("</dt>", 1)[1])
        assert len(described.split()) > 20, f"prfmap.engine.{name} has no real docstring"
    assert 'id="prfmap.engine.fit_prf"' in text and "Parameters" in text


def test_readme_is_a_short_users_page_whose_links_resolve() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for needed in ("make demo", "make test", "make docs", "CITATION.cff", "LICENSE", "pip install"):
        assert needed in readme, needed
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert local and all((REPO / link).exists() for link in local), [
        link for link in local if not (REPO / link).exists()
    ]


@pytest.mark.skipif(os.environ.get("PRFMAP_SKIP_DIST") == "1", reason="PRFMAP_SKIP_DIST=1")
def test_make_dist_builds_checked_sdist_and_wheel(tmp_path: Path) -> None:
    """``make dist``: an sdist and a wheel that ``twine check --strict`` passes, with the licence,
    the report templates and every entry point of pyproject.toml."""
    import tarfile
    import zipfile

    from helpers import project_version

    venv = Path(sys.prefix)
    done = subprocess.run(
        [
            "make",
            "-C",
            str(REPO),
            "-o",
            f"{venv}/.test-installed",
            "dist",
            f"VENV={venv}",
            f"DIST_DIR={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    version = project_version()
    wheel, sdist = tmp_path / f"prfmap-{version}-py3-none-any.whl", tmp_path / f"prfmap-{version}.tar.gz"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([wheel.name, sdist.name])
    assert done.stdout.count("PASSED") == 2, done.stdout[-2000:]
    names = zipfile.ZipFile(wheel).namelist()
    info = f"prfmap-{version}.dist-info"
    assert f"{info}/licenses/LICENSE" in names and "prfmap/report/templates/participant.html.j2" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert (
        "License-Expression: Apache-2.0" in metadata and "Description-Content-Type: text/markdown" in metadata
    )
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    section = (REPO / "pyproject.toml").read_text().split("[project.scripts]\n", 1)[1].split("\n\n", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', section, flags=re.M))
    assert {"prfmap", "prfmap-synth", "prfmap-stimulus"} <= set(scripts)
    for name, target in scripts.items():
        assert f"{name} = {target}" in entry_points, entry_points
    members = tarfile.open(sdist).getnames()
    assert {f"prfmap-{version}/{f}" for f in ("LICENSE", "README.md", "pyproject.toml")} <= set(members)

"""The licence is the Apache-2.0 text pyproject.toml names, and CITATION.cff is valid Citation File
Format 1.2.0 (checked with jsonschema against the format's own schema, kept in tests/data)."""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
import yaml

from helpers import REPO, project_version

SCHEMA = REPO / "tests" / "data" / "citation-cff-1.2.0.schema.json"


@pytest.fixture(scope="module")
def citation() -> dict:
    return yaml.safe_load((REPO / "CITATION.cff").read_text())


def cff_errors(data: dict) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(data)]


def test_license_is_the_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    for section in range(1, 10):  # the nine sections, Definitions to Accepting Warranty
        assert f"\n   {section}. " in text, section
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^license = "Apache-2.0"$', pyproject, re.M)
    assert re.search(r'^license-files = \["LICENSE"\]$', pyproject, re.M)


def test_citation_file_is_valid_cff(citation: dict) -> None:
    assert cff_errors(citation) == []
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software"
    assert str(citation["version"]) == project_version()
    assert citation["license"] == "Apache-2.0"
    assert any(ref.get("doi") == "10.1016/j.neuroimage.2007.09.034" for ref in citation["references"])


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d.pop("authors"),
        lambda d: d.update(version=[0, 1]),
        lambda d: d.update(license="Apache 2"),
        lambda d: d["references"][0].update(doi="not a doi"),
    ],
    ids=["no authors", "version not a string", "not an SPDX licence", "bad doi"],
)
def test_the_schema_check_catches_a_broken_citation(citation: dict, breakage) -> None:
    broken = copy.deepcopy(citation)
    breakage(broken)
    assert cff_errors(broken)

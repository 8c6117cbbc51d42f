"""The launcher's table of prfmap options stays in step with prfmap's own parser."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from prfmap_docker.options import BY_NAME, PRFMAP_OPTIONS

parser_module = pytest.importorskip("prfmap.cli.parser")


def parser_options() -> list[argparse.Action]:
    return [a for a in parser_module.build_parser()._actions if a.option_strings]


def nargs_of(action: argparse.Action):
    if action.nargs == 0:
        return 0
    if action.nargs in ("+", "*"):
        return "+"
    assert action.nargs is None, f"{action.dest}: nargs {action.nargs!r} is new to the launcher"
    return 1


def takes_a_path(action: argparse.Action, probe: Path) -> bool:
    if action.nargs == 0 or action.type is None:
        return False
    try:
        value = action.type(str(probe))
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    values = value if isinstance(value, tuple) else (value,)
    return any(isinstance(v, Path) for v in values)


def test_same_option_spellings():
    ours = {name for opt in PRFMAP_OPTIONS for name in opt.names}
    theirs = {name for a in parser_options() for name in a.option_strings}
    assert ours == theirs, (
        f"add to prfmap_docker/options.py: {sorted(theirs - ours)}; remove: {sorted(ours - theirs)}"
    )


@pytest.mark.parametrize("action", parser_options(), ids=lambda a: a.dest)
def test_same_arity_and_paths(action, tmp_path):
    probe = tmp_path / "probe.json"
    probe.write_text("{}")
    ours = {BY_NAME[name] for name in action.option_strings}
    assert len(ours) == 1, f"{action.option_strings} are split over several launcher options"
    (opt,) = ours
    assert set(opt.names) == set(action.option_strings)
    assert opt.nargs == nargs_of(action)
    assert (opt.path is not None) == takes_a_path(action, probe), (
        f"{action.dest}: the launcher must {'mount' if opt.path is None else 'not mount'} it"
    )

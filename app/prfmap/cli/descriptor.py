"""The Boutiques descriptor's choices, generated from the command line (and so from the catalogue).

``--model`` and ``--refine`` list the models and refiners of :mod:`prfmap.engine.catalog`; a model or
refiner registered there appears in ``build_parser()``'s choices, and :func:`descriptor_choices`
writes the same choices into a descriptor. ``python -m prfmap.cli.descriptor boutiques.json``
rewrites a descriptor in place; ``--check`` only says whether it is in step (exit 1 when not).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prfmap.cli.parser import build_parser
from prfmap.io.atomic import write_text_atomic


def parser_choices(parser: argparse.ArgumentParser | None = None) -> dict[str, list[str]]:
    """Every argument of the command line that has choices, by its destination.

    Parameters
    ----------
    parser : argparse.ArgumentParser, optional
        Default :func:`prfmap.cli.parser.build_parser` (built now, so it sees every registered model).

    Returns
    -------
    dict
        ``dest`` → the choices in order.
    """
    parser = parser or build_parser()
    return {a.dest: [str(c) for c in a.choices] for a in parser._actions if a.choices}


def descriptor_choices(descriptor: Mapping[str, Any], parser: argparse.ArgumentParser | None = None) -> dict:
    """A copy of a Boutiques descriptor whose inputs' ``value-choices`` are the parser's.

    Parameters
    ----------
    descriptor : mapping
        A descriptor (``boutiques.json``): inputs whose ``id`` is an argument's ``dest``.
    parser : argparse.ArgumentParser, optional
        Default :func:`prfmap.cli.parser.build_parser`.

    Returns
    -------
    dict
        The descriptor, with the choices of every input that has them replaced.
    """
    choices = parser_choices(parser)
    out = copy.deepcopy(dict(descriptor))
    for item in out.get("inputs", []):
        if "value-choices" in item and item["id"] in choices:
            item["value-choices"] = choices[item["id"]]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or ``--check``) a descriptor's choices.

    Parameters
    ----------
    argv : sequence of str, optional
        ``DESCRIPTOR [--check]`` (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when written or in step, 1 when ``--check`` finds it out of step.
    """
    args = argparse.ArgumentParser(prog="python -m prfmap.cli.descriptor", description=__doc__)
    args.add_argument("descriptor", type=Path)
    args.add_argument("--check", action="store_true", help="only say whether the choices are in step")
    opts = args.parse_args(argv)
    current = json.loads(opts.descriptor.read_text())
    synced = descriptor_choices(current)
    if opts.check:
        if synced != current:
            print(f"{opts.descriptor}: value-choices out of step with the catalogue", file=sys.stderr)
            return 1
        return 0
    write_text_atomic(opts.descriptor, json.dumps(synced, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``prfmap`` console script: stop signals answered from the first instant, then the command.

Importing the command line (numpy, the parser, the catalogue) takes about half a second, and the
participant level imports a framework a few seconds later; Python's own handlers would print a
``KeyboardInterrupt`` traceback or die silently of SIGTERM there, and a framework interrupted half-way
through its import can crash the interpreter on its way out. So SIGTERM and SIGINT end this process at
once, with one line and exit code 143/130 (:func:`prfmap.runtime.signals.exit_on_signal`), until
:func:`prfmap.cli.run.main` takes over, and again once it has returned, to the process's last instant
(:func:`prfmap.runtime.signals.end_process`).
"""

from __future__ import annotations

from prfmap.runtime.signals import STARTING, end_process, exit_on_signal


def main() -> None:
    """Run ``prfmap`` (:func:`prfmap.cli.run.main`) with stop signals handled throughout."""
    exit_on_signal(STARTING)
    # Imported here: the handlers above must be in place while the command line's modules load.
    from prfmap.cli.run import main as run

    end_process(run())


if __name__ == "__main__":
    main()

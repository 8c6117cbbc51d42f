"""``prfmap-docker``: prfmap's command line on the host, run in the prfmap image."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn

import docker

from prfmap_docker import __version__
from prfmap_docker.command import LauncherError, RunPlan, translate
from prfmap_docker.options import PRFMAP_OPTIONS
from prfmap_docker.runner import (
    EXIT_NO_DAEMON,
    RunSettings,
    caller_user,
    connect,
    device_requests,
    docker_run_command,
    resolve_image,
    run_container,
)

EXIT_CANT_CREATE = 73
USAGE_URL = "https://github.com/prfmap/prfmap/blob/main/docs/cli.md"
"""prfmap's options, for a host where the image cannot show its own help."""
LAUNCHER_OPTIONS = {
    "--image": 1,
    "--gpus": 1,
    "--user": 1,
    "--env": 1,
    "-e": 1,
    "--read-only": 0,
    "--dry-run": 0,
    "--launcher-help": 0,
    "--launcher-version": 0,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise LauncherError(" ".join(message.split()))


def build_launcher_parser() -> argparse.ArgumentParser:
    """The parser of the launcher's own options (every other argument is prfmap's)."""
    prfmap_options = ", ".join(opt.names[0] for opt in PRFMAP_OPTIONS)
    parser = _Parser(
        prog="prfmap-docker",
        add_help=False,
        usage="prfmap-docker [launcher options] bids_dir output_dir {participant,group} [prfmap options]",
        description="Run prfmap in its Docker image. bids_dir is mounted read-only at /data, "
        "output_dir at /out, --work-dir at /work, --derivatives under /derivatives and the "
        "folders of --stimulus and --bids-filter-file under /inputs; the container runs as "
        "you, so the outputs are yours, and exits with prfmap's exit code. The image is "
        "chosen by prfmap's --backend (jax, torch or tensorflow; default jax).",
        epilog=f"prfmap options passed through: {prfmap_options}. Run "
        "'prfmap-docker --help' for prfmap's own help, from the image.",
    )
    parser.add_argument(
        "--image",
        help="image to run (default: prfmap/prfmap:"
        f"{__version__}-<backend>, else a local prfmap:{__version__}-<backend>)",
    )
    parser.add_argument(
        "--gpus",
        help="GPUs as docker run takes them: all, a number, or "
        "device=0,2 (default: none, prfmap computes on the CPU)",
    )
    parser.add_argument(
        "--user",
        default=caller_user(),
        help="uid:gid to run as (default: yours); an empty string runs as the image's own user",
    )
    parser.add_argument(
        "-e",
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for the container; may be repeated",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="read-only root file system, caches on a tmpfs at /tmp"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the equivalent docker run command and exit"
    )
    parser.add_argument("--launcher-help", action="help", help="show this help and exit")
    parser.add_argument("--launcher-version", action="version", version=f"prfmap-docker {__version__}")
    return parser


def split_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate the launcher's own options from prfmap's arguments, keeping their order."""
    ours: list[str] = []
    theirs: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name = token.partition("=")[0] if token.startswith("--") else token
        if name in LAUNCHER_OPTIONS:
            takes = LAUNCHER_OPTIONS[name]
            ours.append(token)
            if takes and name == token:
                if i + 1 >= len(argv):
                    raise LauncherError(f"option {name} expects one value")
                ours.append(argv[i + 1])
                i += 1
        elif token == "--":
            theirs.extend(argv[i:])
            break
        else:
            theirs.append(token)
        i += 1
    return ours, theirs


def _settings(ns: argparse.Namespace) -> RunSettings:
    env = {}
    for item in ns.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LauncherError(f"--env {item!r}: expected NAME=VALUE")
        env[key] = value
    device_requests(ns.gpus)
    return RunSettings(image=ns.image, gpus=ns.gpus, user=ns.user or None, env=env, read_only=ns.read_only)


def _asks_for_help(plan: RunPlan) -> bool:
    """Whether prfmap is asked for its help alone (no data: ``prfmap-docker --help``)."""
    return not plan.mounts and any(arg in ("-h", "--help") for arg in plan.command)


def _help_without_daemon() -> int:
    """The launcher's help, and where prfmap's own is, when no Docker daemon can show the image's."""
    sys.stdout.write(build_launcher_parser().format_help())
    sys.stderr.write(
        "prfmap-docker: no Docker daemon answers, so prfmap's own help (its image's 'prfmap --help') "
        f"cannot be shown; prfmap's options are described in {USAGE_URL}\n"
    )
    return 0


def main(
    argv: list[str] | None = None,
    client_factory: Callable[[], Any] = docker.from_env,
    log: BinaryIO | None = None,
) -> int:
    """Run ``prfmap-docker``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    client_factory : callable, optional
        Returns a docker-py client (default: ``docker.from_env``).
    log : binary file, optional
        Where the container's output goes (default: standard output).

    Returns
    -------
    int
        The container's exit code; 64 for a usage error, 66 for a missing input,
        69 when no Docker daemon answers, 73 when an output folder cannot be created,
        1 when the image cannot be had.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    log = log if log is not None else sys.stdout.buffer
    try:
        ours, theirs = split_arguments(argv)
        ns = build_launcher_parser().parse_args(ours)
        settings = _settings(ns)
        plan = translate(theirs)
        if ns.dry_run:
            print(docker_run_command(plan, settings))
            return 0
        try:
            client = connect(client_factory)
        except LauncherError as err:
            if _asks_for_help(plan) and err.exit_code == EXIT_NO_DAEMON:
                return _help_without_daemon()
            raise
        for folder in plan.create_dirs:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise LauncherError(f"cannot create {folder}: {err.strerror}", EXIT_CANT_CREATE) from None
        image = resolve_image(client, plan.backend, settings.image, log)
        return run_container(client, image, plan, settings, log)
    except LauncherError as err:
        sys.stderr.write(f"prfmap-docker: error: {err}\n")
        return err.exit_code

"""Run a translated prfmap command in its image through docker-py, streaming the log."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from docker.types import DeviceRequest, Mount

from prfmap_docker import __version__
from prfmap_docker.command import LauncherError, RunPlan

PUBLISHED_REPOSITORY = "prfmap/prfmap"
LOCAL_REPOSITORY = "prfmap"
EXIT_NO_DAEMON = 69
EXIT_NO_IMAGE = 1
EXIT_INTERRUPTED = 130
TMPFS_OPTIONS = "rw,exec,nosuid,nodev"


@dataclass
class RunSettings:
    """How the container runs, apart from prfmap's own arguments.

    Attributes
    ----------
    image : str or None
        Image to run; None picks ``prfmap/prfmap:<version>-<backend>`` or the locally built
        ``prfmap:<version>-<backend>``.
    gpus : str or None
        Docker's ``--gpus`` value: ``all``, a count, or ``device=0,2``; None for no GPU.
    user : str or None
        ``uid:gid`` to run as; None runs as the image's own (non-root) user.
    env : dict of str to str
        Extra environment variables.
    read_only : bool
        Read-only root file system with a tmpfs at ``/tmp`` for the caches.
    """

    image: str | None = None
    gpus: str | None = None
    user: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    read_only: bool = False


def caller_user() -> str | None:
    """The caller's ``uid:gid``, or None where the platform has no such ids."""
    if not hasattr(os, "getuid"):
        return None
    return f"{os.getuid()}:{os.getgid()}"


def default_images(backend: str) -> list[str]:
    """Images to look for, in order: the published one, then a local ``docker buildx bake``."""
    tag = f"{__version__}-{backend}"
    return [f"{PUBLISHED_REPOSITORY}:{tag}", f"{LOCAL_REPOSITORY}:{tag}"]


def device_requests(gpus: str | None) -> list[DeviceRequest]:
    """Translate Docker's ``--gpus`` value into docker-py device requests.

    Parameters
    ----------
    gpus : str or None
        ``all``, a number of GPUs, ``device=0,2`` (or ``"device=0,2"``), or None.

    Returns
    -------
    list of docker.types.DeviceRequest
        Empty for None; one request for the GPU capability otherwise.
    """
    if gpus is None:
        return []
    value = gpus.strip().strip('"')
    if value == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if value.isdigit() and int(value) > 0:
        return [DeviceRequest(count=int(value), capabilities=[["gpu"]])]
    if value.startswith("device="):
        ids = [d.strip() for d in value.removeprefix("device=").split(",")]
        if ids and all(ids):
            return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]
    raise LauncherError(f"--gpus {gpus!r}: use all, a number of GPUs, or device=ID[,ID...]")


def docker_run_command(plan: RunPlan, settings: RunSettings) -> str:
    """The equivalent ``docker run`` command line, for ``--dry-run`` and the log."""
    parts = ["docker", "run", "--rm", "--init"]
    for m in plan.mounts:
        parts += ["-v", f"{m.source}:{m.target}" + (":ro" if m.read_only else "")]
    if settings.gpus is not None:
        parts += ["--gpus", settings.gpus]
    if settings.user:
        parts += ["--user", settings.user]
    if settings.read_only:
        parts += ["--read-only", "--tmpfs", f"/tmp:{TMPFS_OPTIONS}"]
    for key, value in settings.env.items():
        parts += ["-e", f"{key}={value}"]
    image = settings.image or default_images(plan.backend)[0]
    return shlex.join([*parts, image, *plan.command])


def connect(client_factory: Callable[[], Any] = docker.from_env) -> Any:
    """A Docker client that answered a ping, or a one-line LauncherError (exit 69)."""
    try:
        client = client_factory()
        client.ping()
    except DockerException as err:
        reason = " ".join(str(err).split())
        raise LauncherError(
            f"cannot reach the Docker daemon ({reason}); is Docker running and may you use it?",
            EXIT_NO_DAEMON,
        ) from None
    return client


def resolve_image(client: Any, backend: str, image: str | None, log: BinaryIO) -> str:
    """Find the image locally, else pull it; a one-line LauncherError when neither works."""
    candidates = [image] if image else default_images(backend)
    for name in candidates:
        try:
            client.images.get(name)
            return name
        except ImageNotFound:
            continue
    name = candidates[0]
    log.write(f"prfmap-docker: pulling {name}\n".encode())
    try:
        client.images.pull(name)
    except (APIError, ImageNotFound) as err:
        reason = " ".join(str(err).split())
        raise LauncherError(
            f"image {name} is neither here nor pullable ({reason}); build it with "
            f"'docker buildx bake -f docker/docker-bake.json {backend}'",
            EXIT_NO_IMAGE,
        ) from None
    return name


def run_container(client: Any, image: str, plan: RunPlan, settings: RunSettings, log: BinaryIO) -> int:
    """Run prfmap in ``image``, copy its output to ``log`` as it comes, return its exit code."""
    kwargs: dict[str, Any] = {
        "command": plan.command,
        "detach": True,
        "init": True,
        "mounts": [
            Mount(target=m.target, source=str(m.source), type="bind", read_only=m.read_only)
            for m in plan.mounts
        ],
        "environment": dict(settings.env),
        "user": settings.user or "",
        "device_requests": device_requests(settings.gpus) or None,
        "read_only": settings.read_only,
    }
    if settings.read_only:
        kwargs["tmpfs"] = {"/tmp": TMPFS_OPTIONS}
    try:
        container = client.containers.run(image, **kwargs)
    except APIError as err:
        reason = " ".join(str(err).split())
        raise LauncherError(f"docker could not start {image}: {reason}", 1) from None
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            log.write(chunk)
            log.flush()
        status = container.wait()
        return int(status.get("StatusCode", 1))
    except KeyboardInterrupt:
        container.stop(timeout=10)
        return EXIT_INTERRUPTED
    finally:
        try:
            container.remove(force=True)
        except DockerException:
            pass

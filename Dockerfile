# syntax=docker/dockerfile:1.7
# prfmap: one image per Keras backend, selected by BACKEND (jax, torch or tensorflow).
#   docker buildx bake -f docker/docker-bake.json   # all three, tagged prfmap:<version>-<backend>
#   docker build --build-arg BACKEND=torch -t prfmap:0.1.0-torch .
# Run (as README.md shows):
#       docker run --rm --gpus all -u "$(id -u):$(id -g)" --read-only --tmpfs /tmp:rw,exec \
#           -v $PWD/bids:/data:ro -v $PWD/out:/out prfmap:0.1.0-jax /data /out participant

ARG BACKEND=jax
ARG PRFMAP_VERSION=0.1.0
# The stage the image is built on: base-jax, base-torch or base-tensorflow below.
ARG BASE_STAGE=base-${BACKEND}

# ---------------------------------------------------------------------------------------
# The prfmap wheel, built from this source tree.
# The build tools are pinned by docker/requirements/lock.txt like everything else installed.
FROM python:3.12.11-slim-bookworm AS wheel
WORKDIR /src
COPY docker/requirements/lock.txt /tmp/lock.txt
RUN python -m pip install --no-cache-dir --constraint /tmp/lock.txt setuptools wheel
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
# With it, neuropythy's: the package data of the fsaverage visual-area atlases of --atlas
# benson14|wang15 (docs/areas.md), AGPL-3.0; prfmap reads the files and never imports the package,
# so none of its dependencies is installed.
RUN python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
 && python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels/atlases \
        neuropythy==0.13.0

# ---------------------------------------------------------------------------------------
# The TemplateFlow surfaces the reports draw on, fetched once here so that the container
# never needs the network (docker/image/fetch_templateflow.py lists them).
FROM python:3.12.11-slim-bookworm AS templateflow
ENV TEMPLATEFLOW_HOME=/opt/templateflow
COPY docker/requirements/templateflow.txt docker/requirements/lock.txt docker/image/constraints.py \
     docker/image/fetch_templateflow.py /tmp/
RUN python /tmp/constraints.py --lock /tmp/lock.txt /tmp/templateflow.txt > /tmp/constraints.txt \
 && python -m pip install --no-cache-dir --constraint /tmp/constraints.txt -r /tmp/templateflow.txt \
 && python /tmp/constraints.py --verify /tmp/constraints.txt /tmp/templateflow.txt \
 && python /tmp/fetch_templateflow.py \
 && chmod -R a+rX,go-w /opt/templateflow

# ---------------------------------------------------------------------------------------
# One base per backend; each leaves an interpreter whose environment is /opt/prfmap.

# JAX: a CUDA 12 base (driver hooks only) and jax[cuda12], whose CUDA libraries are wheels.
FROM nvidia/cuda:12.8.1-base-ubuntu24.04 AS base-jax
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/prfmap

# PyTorch: the official CUDA runtime image. torch.compile (inductor, triton) needs a C/C++
# compiler at run time, which the runtime image lacks.
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime AS base-torch
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ \
 && rm -rf /var/lib/apt/lists/* \
 && python -m venv --without-pip --system-site-packages /opt/prfmap

# TensorFlow: the official GPU image.
FROM tensorflow/tensorflow:2.21.0-gpu AS base-tensorflow
RUN python3 -m venv --without-pip --system-site-packages /opt/prfmap

# ---------------------------------------------------------------------------------------
# The image: prfmap and its pinned dependencies on the chosen base, run as a non-root user.
FROM ${BASE_STAGE} AS runtime
ARG BACKEND
ARG PRFMAP_VERSION
ARG VCS_REF=unknown
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# docker/image/constraints.py holds the base image's own packages (the framework, CUDA wheels,
# NumPy) at their versions and pins every other package from docker/requirements/lock.txt (the
# direct pins in common.txt and <backend>.txt win); the build fails if anything unpinned got in.
RUN --mount=type=bind,source=docker/requirements,target=/tmp/requirements \
    --mount=type=bind,source=docker/image,target=/tmp/image \
    --mount=type=bind,from=wheel,source=/wheels,target=/tmp/wheels \
    /opt/prfmap/bin/python /tmp/image/constraints.py --lock /tmp/requirements/lock.txt \
        /tmp/requirements/common.txt "/tmp/requirements/${BACKEND}.txt" > /opt/prfmap/base-constraints.txt \
 && /opt/prfmap/bin/python -m pip install --no-cache-dir \
        --constraint /opt/prfmap/base-constraints.txt \
        --requirement /tmp/requirements/common.txt \
        --requirement "/tmp/requirements/${BACKEND}.txt" \
        /tmp/wheels/prfmap-*.whl \
 && /opt/prfmap/bin/python /tmp/image/constraints.py --verify /opt/prfmap/base-constraints.txt \
        /tmp/requirements/common.txt "/tmp/requirements/${BACKEND}.txt" \
 && /opt/prfmap/bin/python -m pip install --no-cache-dir --no-deps /tmp/wheels/atlases/neuropythy-*.whl

COPY --from=templateflow /opt/templateflow /opt/templateflow

# Every cache lives under /tmp, so the image also runs with --read-only plus a tmpfs on
# /tmp, and as any uid:gid (prfmap-docker runs as the caller). torch.compile loads the libraries
# it builds from its cache, so mount that tmpfs with exec (--tmpfs /tmp:rw,exec, as prfmap-docker
# does); on a noexec /tmp prfmap moves the caches to --work-dir, or runs uncompiled and says so.
ENV PATH=/opt/prfmap/bin:$PATH \
    KERAS_BACKEND=${BACKEND} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/prfmap \
    USER=prfmap \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/.cache/matplotlib \
    KERAS_HOME=/tmp/.cache/keras \
    NILEARN_DATA=/tmp/.cache/nilearn \
    TORCHINDUCTOR_CACHE_DIR=/tmp/.cache/torchinductor \
    TRITON_CACHE_DIR=/tmp/.cache/triton \
    CUDA_CACHE_PATH=/tmp/.cache/nv \
    TEMPLATEFLOW_HOME=/opt/templateflow \
    TEMPLATEFLOW_AUTOUPDATE=0 \
    XLA_PYTHON_CLIENT_PREALLOCATE=false \
    TF_FORCE_GPU_ALLOW_GROWTH=true \
    TF_CPP_MIN_LOG_LEVEL=2

RUN groupadd --gid 10001 prfmap \
 && useradd --no-log-init --uid 10001 --gid prfmap --create-home --home-dir /home/prfmap \
        --shell /bin/bash prfmap \
 && chmod 1777 /home/prfmap \
 && prfmap --version | cut -d' ' -f2 > /version \
 && test "$(cat /version)" = "${PRFMAP_VERSION}" \
 && python -c "import keras; assert keras.backend.backend() == '${BACKEND}'" \
 && rm -rf /tmp/.cache

LABEL org.opencontainers.image.title="prfmap" \
      org.opencontainers.image.description="pRF mapping BIDS App (Keras 3 on ${BACKEND}, GPU)" \
      org.opencontainers.image.version="${PRFMAP_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.source="https://github.com/prfmap/prfmap" \
      org.opencontainers.image.url="https://github.com/prfmap/prfmap" \
      org.opencontainers.image.licenses="Apache-2.0 AND AGPL-3.0-or-later" \
      org.opencontainers.image.vendor="The prfmap developers" \
      io.github.prfmap.backend="${BACKEND}"

USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["prfmap"]
CMD ["--help"]

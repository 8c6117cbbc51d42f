#!/usr/bin/env bash
# The GPU figures of issue 23 in one command: tests/benchmarks/gpu.py (its docstring says what runs).
#
# On the H200 machine, from the repository root (its copy of the working tree; `carry: [".whl"]`):
#     bash tests/benchmarks/gpu.sh                 # the table on stdout, $OUT/gpu_benchmark.json
# Here, on a CPU, in seconds (tests/test_gpu_benchmark.py runs it in `make test`):
#     bash tests/benchmarks/gpu.sh --dry-run --out /tmp/gpu-dry
#
# The machine's Python 3.12 has JAX, PyTorch, numpy and scipy but not Keras; Keras and the two small
# packages it needs beyond those (namex, optree; absl-py, h5py, ml-dtypes, rich, packaging are there)
# travel as wheels in .whl/, which .gitignore keeps out of git. Made here, once:
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
#       -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0        # 2.8 MB; optree needs typing-extensions (there)
# prfmap itself needs no wheel: app/ is put on PYTHONPATH (the engine imports only numpy, scipy, Keras).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
if ! "$python" -c "import keras" 2>/dev/null; then
    if ! ls "$root"/.whl/*.whl >/dev/null 2>&1; then
        echo "gpu.sh: Keras is not installed and $root/.whl holds no wheels (see this script's header)" >&2
        exit 3
    fi
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/prfmap-site "$root"/.whl/*.whl
    export PYTHONPATH=/tmp/prfmap-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$root/app${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ "${1:-}" != "--dry-run" ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
exec "$python" "$here/gpu.py" "$@"

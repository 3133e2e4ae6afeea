#!/usr/bin/env bash
# .venv-vllm/: vLLM's own v1 Scheduler on the CPU, for `make test-vllm` (tests/vllm/).
#
# vLLM 0.34.0 (the newest on PyPI when pinned) is installed --no-deps beside PyTorch 2.13.0's
# CPU build, with only the pure-Python packages its scheduler imports
# (tests/vllm/requirements-vllm.txt, also --no-deps): no CUDA torch, no triton, no server stack.
# vLLM's compiled kernels (vllm._C) are absent and never needed by the scheduler. About 1.5 GB.
#
# PyTorch: the CPU wheel torch==2.13.0+cpu must be reachable by pip (this project's machines have
# it under pip's find-links). Elsewhere point pip at PyTorch's CPU wheels, e.g.
# PIP_EXTRA_INDEX_URL=<the CPU wheel index>; a plain `torch` from PyPI would be the CUDA build.
#
# Usage: scripts/vllm_venv.sh [VENV_DIR]   (default .venv-vllm; PYTHON picks the interpreter,
# Python 3.11 for the cp311 torch wheel). Re-running is a no-op once the stamp file exists.
set -euo pipefail

VLLM_VERSION=0.34.0
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0+cpu}"
PYTHON="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$here/.venv-vllm}"
stamp="$venv/.installed-vllm-$VLLM_VERSION"

if [ -f "$stamp" ]; then
    exit 0
fi
start=$(date +%s)
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps)
"${pip[@]}" "$TORCH_SPEC" "vllm==$VLLM_VERSION"
"${pip[@]}" -r "$here/tests/vllm/requirements-vllm.txt"
# the check: vLLM's scheduler imports and schedules one request
"$venv/bin/python" "$here/tests/vllm/vllm_driver.py" --self-check
touch "$stamp"
echo "vllm_venv: $venv ready (vLLM $VLLM_VERSION, $TORCH_SPEC) in $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# One GPU session (kvsim/data/calibration/README.md, docs/calibration.md): the GPU tests, the paged vs
# contiguous kernel table, then the step cost's parts (PyTorch). Each part has its own time limit
# and writes into $OUT as it finishes, so a part that fails or runs out loses nothing before it.
# Needs python3 with PyTorch, CuPy, numpy, typer and pytest; kvsim's other dependencies travel as
# wheels in .whl/ (installed into /tmp/site, nothing outside it touched).
set -u
OUT=${OUT:-results/gpu}
mkdir -p "$OUT/parts"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
date -u
nvidia-smi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:.
else
    export PYTHONPATH=.
fi
python3 -c "import torch, cupy, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'cupy', cupy.__version__, 'numpy', numpy.__version__)"
echo "== GPU tests"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/calibrate
echo "== paged vs contiguous kernel (kvsim calibrate)"
SLUG=$(python3 -c "import cupy; from kvsim.calibrate.cli import device_slug as s; \
n = cupy.cuda.runtime.getDeviceProperties(0)['name']; print(s(n.decode() if isinstance(n, bytes) else n))")
timeout ${KERNEL_LIMIT:-150} python3 -m kvsim.calibrate --out "$OUT/${SLUG:-gpu}.csv"
echo "== step-cost parts (kvsim calibrate --parts)"
timeout ${PARTS_LIMIT:-200} python3 -m kvsim.calibrate --parts "$OUT/parts"
date -u

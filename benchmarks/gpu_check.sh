#!/usr/bin/env bash
# The GPU checks of layernorm.kernels in one run: the CUDA tests, then the benchmarks.
# Installs nothing; runs the working tree (PYTHONPATH=src). Writes under $OUT (default
# /tmp/gpu_check): summary.json (each step's exit code and seconds), env.txt, pytest_cuda.xml/.log,
# gpu_bench.json/.log, bench_rnn.json/.log, bench_norms.json/.log. Each step has its own time
# limit, about 7.5 minutes in all on an H200 (most of it the first-use Triton compiles and the
# torch-ops loop rows); a failing step does not stop the next one.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh            # from the repository root
#   QUICK=1 bash benchmarks/gpu_check.sh                  # small RNN shape only (~3 minutes)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export LAYERNORM_CACHE=${LAYERNORM_CACHE:-${TMPDIR:-/tmp}/layernorm-cache}
unset TRITON_INTERPRET
PY=${PYTHON:-python}
STEPS=()

step() {  # step NAME LIMIT_SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit}s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$OUT/$name.log"
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    STEPS+=("{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}")
}

{
    date -u
    nvidia-smi 2>&1 | head -n 20
    $PY -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda',
torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA')"
    $PY -c "import triton; print('triton', triton.__version__)" 2>&1
    $PY -c "import pytest; print('pytest', pytest.__version__)" 2>&1
    git log --oneline -n 3 2>/dev/null
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if $PY -c "import pytest" 2>/dev/null; then
    # the CUDA tests of the kernels and of the modules that use them (compiled, not interpreted)
    TIMEOUT_OPT=()
    $PY -c "import pytest_timeout" 2>/dev/null ||
        TIMEOUT_OPT=(-W "ignore::pytest.PytestConfigWarning")  # pyproject's timeout option
    step pytest_cuda 170 $PY -m pytest -q --maxfail=5 -m cuda -p no:cacheprovider \
        ${TIMEOUT_OPT[@]+"${TIMEOUT_OPT[@]}"} --junitxml="$OUT/pytest_cuda.xml" \
        tests/test_triton.py tests/test_triton_cuda.py tests/test_rnn.py tests/test_norms.py
else
    echo "pytest is not installed here: CUDA tests skipped" | tee "$OUT/pytest_cuda.log"
    STEPS+=("{\"step\": \"pytest_cuda\", \"rc\": null, \"seconds\": 0}")
fi

BENCH_OPT=()
[ -n "${QUICK:-}" ] && BENCH_OPT=(--quick)
step gpu_bench 200 $PY benchmarks/gpu_bench.py ${BENCH_OPT[@]+"${BENCH_OPT[@]}"} \
    --json "$OUT/gpu_bench.json"
# the project's own benchmark commands on the device (fp32; their rows use the kernels too)
step bench_rnn 60 $PY -m layernorm bench rnn --device cuda --quick --no-loop \
    --json "$OUT/bench_rnn.json"
step bench_norms 30 $PY -m layernorm bench norms --device cuda --repeat 10 \
    --json "$OUT/bench_norms.json"

(IFS=,; echo "[${STEPS[*]}]") >"$OUT/summary.json"
echo "== summary: $(cat "$OUT/summary.json")"

#!/usr/bin/env bash
# Installs what the checks need and runs every check and test of the project.
# The same command runs locally and in CI (.ci/run calls it).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
step() { printf '\n== %s\n' "$*"; }

step "install (editable, with test extras)"
"$PY" -m pip install -q --disable-pip-version-check -e '.[test]'

step "rust: fmt, clippy, tests"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# The core as it ships: without the `testing` feature (no synthetic generator).
cargo clippy -p hybridplan-core --lib -- -D warnings
cargo test --workspace -q

step "python: ruff, stubs"
"$PY" -m ruff check python tests benches scripts experiments replay
"$PY" -m ruff format --check python tests benches scripts experiments replay
"$PY" -m mypy.stubtest hybridplan._core

# Every test twice, with TensorFlow's own CPU kernels (oneDNN off: what an AVX2-only CPU
# runs by default) and with oneDNN's (what an AVX-512 CPU runs by default), each in a
# process of its own: kernels differ in their scratch (docs/devices.md, "Kernel
# workspace") and in their arithmetic, and every check must hold under both.
# pytest exits 5 when it collects no test; set -e turns that into a failure.
for onednn in 0 1; do
    step "pytest, TF_ENABLE_ONEDNN_OPTS=$onednn"
    # --durations=15: the 15 slowest tests of the run, to show where the time goes.
    TF_ENABLE_ONEDNN_OPTS=$onednn "$PY" -m pytest -q --durations=15 "$@"
    if [ "$#" -eq 0 ]; then
        # The Keras-remat experiment's self-check (experiments/, so not under tests/).
        TF_ENABLE_ONEDNN_OPTS=$onednn "$PY" experiments/remat_compare.py --check
    fi
done

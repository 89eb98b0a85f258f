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
# pytest exits 5 when it collects no test: that fails the check like any other exit.
# Most tests keep one core busy, so with two cores or more the two runs go side by
# side, each into a log printed when both have ended; with one, one after the other.
run_tests() {
    local onednn=$1
    shift
    # --durations=15: the 15 slowest tests of the run, to show where the time goes.
    # No cache provider: the two runs share the working tree.
    TF_ENABLE_ONEDNN_OPTS=$onednn "$PY" -m pytest -q -p no:cacheprovider --durations=15 "$@" || return $?
    if [ "$#" -eq 0 ]; then
        # The Keras-remat experiment's self-check (experiments/, so not under tests/).
        TF_ENABLE_ONEDNN_OPTS=$onednn "$PY" experiments/remat_compare.py --check || return $?
    fi
}

if [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then
    step "pytest, TF_ENABLE_ONEDNN_OPTS=0 and =1 side by side"
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
    # Background jobs ignore Ctrl-C: an interrupt stops both runs and what
    # they started.
    kill_tree() {
        local child
        for child in $(pgrep -P "$1" || true); do
            kill_tree "$child"
        done
        kill -TERM "$1" 2>/dev/null || true
    }
    trap 'kill_tree "$pid0"; kill_tree "$pid1"; exit 130' INT TERM
    run_tests 0 "$@" > "$logs/0.log" 2>&1 &
    pid0=$!
    run_tests 1 "$@" > "$logs/1.log" 2>&1 &
    pid1=$!
    rc0=0 rc1=0
    wait "$pid0" || rc0=$?
    wait "$pid1" || rc1=$?
    for onednn in 0 1; do
        rc=$rc0
        [ "$onednn" -eq 1 ] && rc=$rc1
        step "pytest, TF_ENABLE_ONEDNN_OPTS=$onednn: exit $rc"
        cat "$logs/$onednn.log"
    done
    if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ]; then
        echo "FAILED: TF_ENABLE_ONEDNN_OPTS=0 exit $rc0, =1 exit $rc1" >&2
        exit 1
    fi
else
    for onednn in 0 1; do
        step "pytest, TF_ENABLE_ONEDNN_OPTS=$onednn"
        run_tests "$onednn" "$@"
    done
fi

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
# Extra pytest options of the runs side by side.
pytest_opts=()
run_tests() {
    local onednn=$1
    shift
    # --durations=15: the 15 slowest tests of the run, to show where the time goes.
    TF_ENABLE_ONEDNN_OPTS=$onednn "$PY" -m pytest -q ${pytest_opts[@]+"${pytest_opts[@]}"} --durations=15 "$@" || return $?
    if [ "$#" -eq 0 ]; then
        # The Keras-remat experiment's self-check (experiments/, so not under tests/).
        TF_ENABLE_ONEDNN_OPTS=$onednn "$PY" experiments/remat_compare.py --check || return $?
    fi
}

if [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then
    step "pytest, TF_ENABLE_ONEDNN_OPTS=0 and =1 side by side"
    # No cache provider: the two runs share the working tree.
    pytest_opts=(-p no:cacheprovider)
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
    pids=('' '')
    # Each run in a process group of its own (job control on while they
    # start), so that an interrupt stops all a run started; what each run
    # printed so far is shown.
    stop() {
        local pid onednn
        for pid in "${pids[@]}"; do
            [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || true
        done
        for onednn in 0 1; do
            step "pytest, TF_ENABLE_ONEDNN_OPTS=$onednn: interrupted; its last lines"
            tail -n 40 "$logs/$onednn.log" 2>/dev/null || true
        done
        exit "$1"
    }
    trap 'stop 130' INT
    trap 'stop 143' TERM
    set -m
    for onednn in 0 1; do
        run_tests "$onednn" "$@" < /dev/null > "$logs/$onednn.log" 2>&1 &
        pids[onednn]=$!
    done
    set +m
    rcs=(0 0)
    for onednn in 0 1; do
        wait "${pids[onednn]}" || rcs[onednn]=$?
        pids[onednn]=''
    done
    trap - INT TERM
    for onednn in 0 1; do
        step "pytest, TF_ENABLE_ONEDNN_OPTS=$onednn: exit ${rcs[onednn]}"
        cat "$logs/$onednn.log"
    done
    if [ "${rcs[0]}" -ne 0 ] || [ "${rcs[1]}" -ne 0 ]; then
        echo "FAILED: TF_ENABLE_ONEDNN_OPTS=0 exit ${rcs[0]}, =1 exit ${rcs[1]}" >&2
        exit 1
    fi
else
    for onednn in 0 1; do
        step "pytest, TF_ENABLE_ONEDNN_OPTS=$onednn"
        run_tests "$onednn" "$@"
    done
fi

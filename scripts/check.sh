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
cargo test --workspace -q

step "python: ruff, stubs"
"$PY" -m ruff check python tests benches scripts experiments
"$PY" -m ruff format --check python tests benches scripts experiments
"$PY" -m mypy.stubtest hybridplan._core

step "pytest"
# pytest exits 5 when it collects no test; set -e turns that into a failure.
"$PY" -m pytest -q "$@"

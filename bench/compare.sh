#!/usr/bin/env bash
# Runs the whole store comparison and prints `RESULT <implementation> <workload> <value>
# <unit>` lines, then the ratios and the targets (see bench/README.md).
#
#   bench/compare.sh            # build, install, run everything (about 9-10 minutes)
#
# Builds in release mode (our example and server, the separate rmcp project), installs
# node dependencies from the lockfiles and the Python venv from pinned requirements, runs
# each implementation in turn (never two at once), then draws bench/cycles.png.
# Exits non-zero on a harness failure; a missed target is reported, not fatal.
# All output is also written to bench/results/ (gitignored).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$BENCH/results"
mkdir -p "$OUT"
RESULTS="$OUT/results.txt"
: > "$RESULTS"

log() { echo "compare.sh: $*" >&2; }
need() { command -v "$1" >/dev/null || { log "$1 not found"; exit 1; }; }
need cargo; need node; need npm; need python3

# ----- build and install (before any measurement) ------------------------------------
log "building our store's comparison example and mcp-task-server (release)"
(cd "$ROOT" && cargo build --release --example compare --bin mcp-task-server) >&2
log "building the rmcp comparison (its own cargo project and lockfile)"
(cd "$BENCH/rmcp" && cargo build --release --locked --target-dir "$CARGO_TARGET_DIR/rmcp-bench") >&2

npm_ci() { # npm ci only when node_modules is missing or from another lockfile
    local dir=$1 stamp want have
    stamp="$dir/node_modules/.bench-lock.sha256"
    want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    have=$(cat "$stamp" 2>/dev/null || true)
    if [ ! -d "$dir/node_modules" ] || [ "$want" != "$have" ]; then
        log "npm ci in $dir"
        (cd "$dir" && npm ci --no-audit --no-fund) >&2
        echo "$want" > "$stamp"
    fi
}
npm_ci "$BENCH/ts"
npm_ci "$ROOT/tests/interop/ts"   # the reference server's own pinned SDK

VENV="$BENCH/py/.venv"
req_stamp="$VENV/.bench-req.sha256"
want=$(sha256sum "$BENCH/py/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$want" != "$(cat "$req_stamp" 2>/dev/null || true)" ]; then
    log "creating the Python venv from bench/py/requirements.txt"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet -r "$BENCH/py/requirements.txt" >&2
    echo "$want" > "$req_stamp"
fi

# ----- run ---------------------------------------------------------------------------
run() { # name, command...: runs one program, tees its lines, fails the script on failure
    local name=$1; shift
    log "running $name"
    if ! "$@" 2> "$OUT/$name.stderr" | tee -a "$RESULTS"; then
        log "$name failed; its stderr:"; tail -20 "$OUT/$name.stderr" >&2
        exit 1
    fi
}
COMPARE="$CARGO_TARGET_DIR/release/examples/compare"
run rust "$COMPARE" all
for impl in ours mutex; do
    run "mem-$impl-0" "$COMPARE" mem "$impl" 0 1000000
    run "mem-$impl-1k" "$COMPARE" mem "$impl" 1024 1000000
done
run ts bash -c "cd '$BENCH/ts' && node store.mjs all"
run mem-ts-0 bash -c "cd '$BENCH/ts' && node --expose-gc store.mjs mem 0 1000000"
run mem-ts-1k bash -c "cd '$BENCH/ts' && node --expose-gc store.mjs mem 1024 1000000"
run py "$VENV/bin/python" "$BENCH/py/store.py" all
run mem-py-0 "$VENV/bin/python" "$BENCH/py/store.py" mem 0 1000000
run mem-py-1k "$VENV/bin/python" "$BENCH/py/store.py" mem 1024 1000000
run rmcp "$CARGO_TARGET_DIR/rmcp-bench/release/rmcp-task-bench"
run e2e bash -c "cd '$BENCH/ts' && node e2e.mjs '$CARGO_TARGET_DIR/release/mcp-task-server'"

# ----- ratios, targets, chart --------------------------------------------------------
"$VENV/bin/python" "$BENCH/report.py" "$RESULTS" | tee "$OUT/report.txt"
"$VENV/bin/python" "$BENCH/chart.py" "$RESULTS" "$BENCH/cycles.png"
log "done: $RESULTS, $OUT/report.txt, $BENCH/cycles.png"

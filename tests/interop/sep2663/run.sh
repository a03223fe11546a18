#!/usr/bin/env bash
# SEP-2663 interop test: @modelcontextprotocol/ext-tasks + @modelcontextprotocol/client (pinned in
# package-lock.json) drive $MCP_TASK_SERVER over stdio (spawned with no arguments).
#
#   tests/interop/sep2663/run.sh                    # server = ../../../target/debug/mcp-task-server
#   MCP_TASK_SERVER=/path/to/server tests/interop/sep2663/run.sh
#   tests/interop/sep2663/run.sh --test-name-pattern=cancel   # extra args go to `node --test`
#
# INTEROP_VERBOSE=1 prints every raw task request/response and the server's stderr.
# Exits non-zero on any failure; nothing is skipped.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

# shellcheck source=../../support/npm.sh
source "$here/../../support/npm.sh"
npm_ci_if_stale

export MCP_TASK_SERVER="${MCP_TASK_SERVER:-$here/../../../target/debug/mcp-task-server}"
if [ ! -x "$MCP_TASK_SERVER" ]; then
    echo "run.sh: server '$MCP_TASK_SERVER' not found or not executable (cargo build, or set MCP_TASK_SERVER)" >&2
    exit 2
fi
echo "run.sh: server under test: $MCP_TASK_SERVER (stdio, no arguments)" >&2

status=0
node --test --test-reporter=spec --test-concurrency=1 "$@" interop.test.mjs || status=$?
if [ "$status" -ne 0 ]; then
    echo "run.sh: FAILED (exit $status)" >&2
else
    echo "run.sh: OK" >&2
fi
exit "$status"

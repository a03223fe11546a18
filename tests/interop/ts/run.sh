#!/usr/bin/env bash
# Runs the TypeScript-SDK interop suite.
#
#   tests/interop/ts/run.sh                      # against the SDK reference server
#   MCP_SERVER_CMD='["/work/main/target/debug/mcp-task-server","--page-size","4"]' \
#     tests/interop/ts/run.sh                    # against any stdio MCP server (JSON argv)
#
# Extra arguments go to `node --test` (e.g. --test-name-pattern='cancel').
# INTEROP_VERBOSE=1 echoes the server's stderr. Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

# shellcheck source=../../support/npm.sh
source "$here/../../support/npm.sh"
npm_ci_if_stale

if [ -n "${MCP_SERVER_CMD:-}" ]; then
    echo "run.sh: server under test: MCP_SERVER_CMD=$MCP_SERVER_CMD" >&2
else
    echo "run.sh: server under test: reference server (node reference-server.mjs); set MCP_SERVER_CMD to test another" >&2
fi

status=0
node --test --test-reporter=spec "$@" interop.test.mjs || status=$?

if [ -z "${MCP_SERVER_CMD:-}" ]; then
    echo >&2
    echo "run.sh: NOTE: tests marked '# TODO KNOWN DEVIATION' are spec checks the SDK reference server" >&2
    echo "run.sh:       is known to fail; they are reported, not counted, ONLY for the reference server." >&2
fi
if [ "$status" -ne 0 ]; then
    echo "run.sh: FAILED (exit $status)" >&2
else
    echo "run.sh: OK" >&2
fi
exit "$status"

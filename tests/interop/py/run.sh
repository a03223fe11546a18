#!/usr/bin/env bash
# Runs the Python-SDK interop suite: the official MCP Python SDK client (PyPI `mcp`, pinned in
# requirements.txt) against mcp-task-server, over stdio and over Streamable HTTP.
#
#   MCP_TASK_SERVER=target/debug/mcp-task-server bash tests/interop/py/run.sh
#
# Extra arguments go to interop_suite.py (--transport stdio|http|both, --only SUBSTRING).
# INTEROP_VERBOSE=1 echoes the server's stderr. Exits non-zero on any failure; a missing
# python3, venv module or pip, or a failed install, is a failure too, never a skip.
set -euo pipefail

die() {
    echo "run.sh: $*" >&2
    exit 2
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

[ -n "${MCP_TASK_SERVER:-}" ] ||
    die "MCP_TASK_SERVER is not set: give the path of the mcp-task-server binary, e.g. MCP_TASK_SERVER=target/debug/mcp-task-server bash tests/interop/py/run.sh"
# Resolve against the caller's directory before changing to ours.
server="$(realpath -e -- "$MCP_TASK_SERVER" 2>/dev/null)" ||
    die "MCP_TASK_SERVER=$MCP_TASK_SERVER does not exist (build it: cargo build --bin mcp-task-server)"
[ -f "$server" ] && [ -x "$server" ] || die "MCP_TASK_SERVER=$server is not an executable file"

cd "$here"

command -v python3 >/dev/null || die "python3 not found (need Python >= 3.11; Debian: apt-get install python3 python3-venv)"
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
    die "Python >= 3.11 required (requirements.txt is frozen for it; older ones need backports it does not pin), found $(python3 --version 2>&1)"
python3 -c 'import venv, ensurepip' 2>/dev/null ||
    die "python3 cannot create virtual environments with pip (modules venv/ensurepip missing; Debian: apt-get install python3-venv)"

# (Re)create the venv only when it is missing, or was made from another requirements.txt or
# by another python3 (the stamp holds both).
venv=.venv
stamp="$venv/.requirements.sha256"
want="$(sha256sum requirements.txt | cut -d' ' -f1) $(python3 -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')"
have=$(cat "$stamp" 2>/dev/null || true)
if [ ! -x "$venv/bin/python" ] || [ "$want" != "$have" ]; then
    echo "run.sh: installing the pinned Python packages into $here/$venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed"
    "$venv/bin/python" -m pip --version >/dev/null 2>&1 || die "pip is not available in the new venv"
    # --no-deps: requirements.txt pins every package; pip check then fails if one is missing.
    # --only-binary: wheels only, so no unpinned build dependency is ever fetched.
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
        --no-deps --only-binary=:all: -r requirements.txt >&2 ||
        die "pip install -r requirements.txt failed (is PyPI reachable?)"
    "$venv/bin/python" -m pip check --disable-pip-version-check >&2 ||
        die "pip check failed: requirements.txt does not pin every dependency of mcp"
    echo "$want" >"$stamp"
fi

echo "run.sh: server under test: $server" >&2
status=0
MCP_TASK_SERVER="$server" "$venv/bin/python" interop_suite.py "$@" || status=$?
if [ "$status" -ne 0 ]; then
    echo "run.sh: FAILED (exit $status)" >&2
else
    echo "run.sh: OK" >&2
fi
exit "$status"

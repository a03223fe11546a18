#!/usr/bin/env bash
# The project's whole test run: formatting, lints, docs, every Rust test (unit, integration,
# doc tests) and the interop suites. Does its own set-up; CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Tools the tests need besides cargo: a C compiler and valgrind (the C ABI tests), Python
# with venv (the ctypes test, the Python SDK interop suite), Node and npm (the other interop
# suites). Install what a fresh machine lacks.
missing=()
command -v gcc >/dev/null || missing+=(gcc)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v python3 >/dev/null || missing+=(python3)
# The Python SDK interop suite makes its own virtual environment.
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi
for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "test.sh: $tool is required (Node 20+)" >&2; exit 1; }
done

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, warnings are errors)"
cargo clippy --all-targets --all-features -- -D warnings
step "cargo clippy (library without default features: feature gates leave no dead code)"
cargo clippy --lib --no-default-features -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --quiet
# Private items too: their links are what a contributor reads.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --document-private-items --quiet

step "cargo test (unit, integration and doc tests)"
cargo test --all-features

step "the fuzz targets still build against the crate (they are run by hand: see Fuzzing)"
cargo check --quiet --manifest-path fuzz/Cargo.toml --locked --bins

step "the committed C header matches the pinned cbindgen's output"
cbindgen_version=0.29.4
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $cbindgen_version" ]; then
    cargo install cbindgen --version "$cbindgen_version" --locked --quiet
fi
sh ffi/check-header.sh

step "no async runtime in the dependency tree"
if cargo tree --all-features -e normal,build --prefix none | grep -E '^(tokio|async-std|smol|futures-executor|async-executor) '; then
    echo "an async runtime crept into the dependency tree" >&2
    exit 1
fi
echo "none"

cargo build --quiet --bin mcp-task-server
# Where cargo put it, CARGO_TARGET_DIR or not.
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
server="$target_dir/debug/mcp-task-server"
ts_server="[\"$server\",\"--page-size\",\"4\",\"--poll-interval\",\"100ms\"]"

step "interop: the official TypeScript SDK client (2025-11-25) over stdio"
MCP_SERVER_CMD="$ts_server" bash tests/interop/ts/run.sh

step "interop: the official TypeScript SDK client (2025-11-25) over Streamable HTTP"
MCP_SERVER_TRANSPORT=http MCP_SERVER_CMD="$ts_server" bash tests/interop/ts/run.sh

step "interop: the official Python SDK client (2025-11-25) over stdio and Streamable HTTP"
MCP_TASK_SERVER="$server" bash tests/interop/py/run.sh

step "interop: a SEP-2663 client (@modelcontextprotocol/ext-tasks) over stdio"
MCP_TASK_SERVER="$server" bash tests/interop/sep2663/run.sh

step "conformance: every tasks-* server scenario of @modelcontextprotocol/conformance over HTTP"
MCP_TASK_SERVER="$server" bash tests/conformance/run.sh

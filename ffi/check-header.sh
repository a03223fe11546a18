#!/usr/bin/env sh
# Regenerates include/mcp_task_store.h with the pinned cbindgen and fails if the committed
# header differs. CI runs it as is; `--update` rewrites the committed header instead.
#
#   cargo install cbindgen --version 0.29.4 --locked
#   ffi/check-header.sh            # check (exit 1 on any difference)
#   ffi/check-header.sh --update   # regenerate include/mcp_task_store.h
set -eu

CBINDGEN_VERSION=0.29.4
root=$(cd "$(dirname "$0")/.." && pwd)
header="$root/include/mcp_task_store.h"
cbindgen=${CBINDGEN:-cbindgen}

found=$("$cbindgen" --version 2>/dev/null || true)
if [ "$found" != "cbindgen $CBINDGEN_VERSION" ]; then
    echo "error: need cbindgen $CBINDGEN_VERSION, found '${found:-none}'" >&2
    echo "       cargo install cbindgen --version $CBINDGEN_VERSION --locked" >&2
    exit 2
fi

tmp=$(mktemp "${TMPDIR:-/tmp}/mcp_task_store.h.XXXXXX")
trap 'rm -f "$tmp"' EXIT INT TERM
"$cbindgen" --quiet --config "$root/cbindgen.toml" --crate mcp-task-store \
    --output "$tmp" "$root"

case "${1:-}" in
--update)
    cp "$tmp" "$header"
    echo "wrote $header"
    ;;
"")
    if ! diff -u "$header" "$tmp"; then
        echo "error: include/mcp_task_store.h is out of date; run ffi/check-header.sh --update" >&2
        exit 1
    fi
    echo "include/mcp_task_store.h is up to date (cbindgen $CBINDGEN_VERSION)"
    ;;
*)
    echo "usage: $0 [--update]" >&2
    exit 2
    ;;
esac

# Shared by the external suites' run.sh scripts (source it, then call the function).
#
# npm_ci_if_stale: in the current directory, checks that Node >= 20 and npm are present
# (failing loudly otherwise) and runs `npm ci` from package-lock.json only when
# node_modules is missing or was installed from a different lockfile.
npm_ci_if_stale() {
    command -v node >/dev/null || { echo "run.sh: node not found (need Node >= 20)" >&2; exit 2; }
    command -v npm >/dev/null || { echo "run.sh: npm not found" >&2; exit 2; }
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    if [ "$major" -lt 20 ]; then
        echo "run.sh: Node >= 20 required, found $(node --version)" >&2
        exit 2
    fi
    local stamp=node_modules/.lockfile.sha256 want have
    want=$(sha256sum package-lock.json | cut -d' ' -f1)
    have=$(cat "$stamp" 2>/dev/null || true)
    if [ ! -d node_modules ] || [ "$want" != "$have" ]; then
        echo "run.sh: installing dependencies (npm ci)" >&2
        npm ci --no-audit --no-fund >&2
        echo "$want" > "$stamp"
    fi
}

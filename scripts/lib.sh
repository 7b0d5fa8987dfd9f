# Shared helpers for scripts/run and scripts/test (sourced, not executed).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The server browserd uses when DATABASE_URL is unset, its private cluster is not there and
# something answers on 127.0.0.1:5432 (crates/browserd/src/private_postgres.rs).
DEFAULT_DATABASE_URL="postgres://postgres@127.0.0.1:5432/browserd"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs Debian packages that are missing.
ensure_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "==> apt-get install ${missing[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

# As root, browserd runs Chrome as this unprivileged user, with Chrome's sandbox on
# (crates/browser/src/launch.rs); without it Chrome would fall back to `nobody`.
ensure_chrome_user() {
    if [ "$(id -u)" -eq 0 ] && ! id -u browserd-chrome >/dev/null 2>&1; then
        echo "==> useradd browserd-chrome (Chrome's user under a root worker)"
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
            browserd-chrome
    fi
}

# Live (not zombie) processes of Chrome's user, one pid a line.
chrome_pids() {
    id -u browserd-chrome >/dev/null 2>&1 || return 0
    # ps exits 1 when the user has no process.
    { ps -u browserd-chrome -o pid=,stat= || true; } | awk '$2 !~ /^Z/ { print $1 }' | sort
}

# Lists, then kills, Chrome processes that appeared since `chrome_pids` printed $1 and are still
# there after their exit watchers had time to act (they poll once a second). Reports only: a
# leftover is a bug to chase from this list, not a reason to fail the run.
report_leftover_chrome() {
    local before="$1" left pid
    for _ in 1 2 3 4 5; do
        left="$(comm -13 <(echo "$before") <(chrome_pids) | grep . || true)"
        [ -z "$left" ] && return 0
        sleep 1
    done
    echo "==> WARNING: Chrome processes outlived the tests:" >&2
    for pid in $left; do
        ps -o pid=,ppid=,lstart=,args= -p "$pid" 2>/dev/null | cut -c1-300 >&2 || true
    done
    for pid in $left; do kill -9 "$pid" 2>/dev/null || true; done
}

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found: install Rust first (https://rustup.rs), e.g." >&2
        echo "  curl --proto '=https' -sSf https://sh.rustup.rs | sh" >&2
        exit 1
    fi
}

# answers HOST PORT: whether something accepts TCP connections there.
answers() {
    timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

# browserd's data directory, as the binary chooses it (--data-dir, BROWSERD_DATA_DIR).
browserd_data_dir() {
    if [ -n "${BROWSERD_DATA_DIR:-}" ]; then
        printf '%s\n' "$BROWSERD_DATA_DIR"
    elif [ "$(id -u)" -eq 0 ]; then
        printf '%s\n' /var/lib/browserd
    else
        printf '%s\n' "${XDG_DATA_HOME:-$HOME/.local/share}/browserd"
    fi
}

# ensure_postgres: decides where the database is, as the binary will. DATABASE_URL when set;
# else browserd's private cluster (PRIVATE_POSTGRES=1) when it exists or when nothing answers
# on 127.0.0.1:5432: then Debian's `postgresql` package (its binaries) is installed when
# missing. Else the server on 5432 (PRIVATE_POSTGRES=0).
ensure_postgres() {
    PRIVATE_POSTGRES=0
    if [ -z "${DATABASE_URL:-}" ] &&
        { [ -f "$(browserd_data_dir)/postgres/PG_VERSION" ] || ! answers 127.0.0.1 5432; }; then
        PRIVATE_POSTGRES=1
        if ! compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
            ensure_packages postgresql
        fi
    fi
}

# Fails with a clear message when the Postgres server in DATABASE_URL (default: the server on
# 127.0.0.1:5432) does not answer. A Unix-socket URL (`postgres:///db?host=/dir&port=5432`, as
# `browserd postgres url` prints) is checked by its socket file.
check_postgres() {
    local url="${DATABASE_URL:-$DEFAULT_DATABASE_URL}" hostport host port query
    hostport="$(printf '%s' "$url" | sed -E 's#^[a-z]+://([^@/]*@)?([^/?]*).*#\2#')"
    query="$(printf '%s' "$url" | sed -nE 's#^[^?]*\?(.*)$#\1#p' | tr '&' '\n')"
    host="$(printf '%s\n' "$query" | sed -nE 's#^host=(.*)$#\1#p' | head -n1)"
    port="$(printf '%s\n' "$query" | sed -nE 's#^port=(.*)$#\1#p' | head -n1)"
    if [ -z "$host" ]; then
        host="${hostport%:*}"
        [ "$hostport" != "${hostport##*:}" ] && port="${hostport##*:}"
    fi
    port="${port:-5432}"
    host="$(printf '%b' "${host//%/\\x}")"
    if [ "${host#/}" != "$host" ]; then
        if [ ! -S "$host/.s.PGSQL.$port" ]; then
            echo "Postgres is not listening on the socket $host/.s.PGSQL.$port (DATABASE_URL)." >&2
            echo "Start it, e.g.: ./target/release/browserd postgres start" >&2
            exit 1
        fi
    elif ! answers "${host:-127.0.0.1}" "$port"; then
        echo "Postgres is not reachable at ${host}:${port} (DATABASE_URL)." >&2
        echo "Start one, e.g.: apt-get install postgresql && service postgresql start" >&2
        echo "or: docker compose up -d postgres; or unset DATABASE_URL and stop what answers" >&2
        echo "on 5432: browserd then runs a private cluster of its own" >&2
        exit 1
    fi
}

# ensure_venv REQUIREMENTS.txt: creates (once) a virtualenv holding the pinned packages and
# prints its directory. Keyed by the requirements file's name and hash; serialized by flock.
ensure_venv() {
    local requirements="$1" cache name venv
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/browserd-venvs"
    name="$(basename "$(dirname "$requirements")")-$(basename "$requirements" .txt)"
    venv="$cache/$name-$(sha256sum "$requirements" | cut -c1-12)"
    mkdir -p "$cache"
    (
        flock 9
        if [ ! -f "$venv/.complete" ]; then
            rm -rf "$venv"
            if ! python3 -m venv "$venv" >/dev/null 2>&1; then
                rm -rf "$venv"
                ensure_packages python3-venv >&2
                python3 -m venv "$venv" >&2
            fi
            "$venv/bin/pip" install --quiet --disable-pip-version-check --require-virtualenv \
                --only-binary=:all: -r "$requirements" >&2
            touch "$venv/.complete"
        fi
    ) 9>"$cache/.lock"
    printf '%s\n' "$venv"
}

# Node.js and npm (Debian packages) for the widget corpus, when missing.
ensure_node() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        ensure_packages nodejs npm
    fi
}

# ensure_widgets: installs the widget corpus's pinned npm packages (tests/widgets/package-lock.json,
# `npm ci`) and bundles its pages with esbuild, once, and prints the bundle's directory.
# node_modules is keyed by the lock file's hash, the bundle by the hash of the lock file, the build
# script and the sources; both live under target/widgets. Serialized by flock.
ensure_widgets() {
    local src="$ROOT/tests/widgets" cache lock_hash build_hash modules dist
    cache="${CARGO_TARGET_DIR:-$ROOT/target}/widgets"
    lock_hash="$(sha256sum "$src/package-lock.json" | cut -c1-12)"
    build_hash="$(cat "$src/package-lock.json" "$src/build.mjs" "$src"/src/* | sha256sum | cut -c1-12)"
    modules="$cache/modules-$lock_hash"
    dist="$cache/dist-$build_hash"
    mkdir -p "$cache"
    (
        flock 9
        if [ ! -f "$modules/.complete" ]; then
            ensure_node >&2
            rm -rf "$modules"
            mkdir -p "$modules"
            cp "$src/package.json" "$src/package-lock.json" "$modules/"
            (cd "$modules" && npm ci --no-audit --no-fund --loglevel=error >&2)
            touch "$modules/.complete"
        fi
        if [ ! -f "$dist/.complete" ]; then
            rm -rf "$dist"
            NODE_PATH="$modules/node_modules" node "$src/build.mjs" "$dist" >&2
            touch "$dist/.complete"
        fi
    ) 9>"$cache/.lock"
    printf '%s\n' "$dist"
}

# ensure_python_apps: the virtualenvs of the widget corpus's Python apps (tests/python/gradio and
# tests/python/streamlit, pinned requirements; tests/tests/widgets.rs), made once each by
# ensure_venv. Made before the tests so that their install time (~35 s and ~55 s) is not spent
# inside a test, where the apps' tests would wait for each other on ensure_venv's lock.
ensure_python_apps() {
    local app
    for app in gradio streamlit; do
        ensure_venv "$ROOT/tests/python/$app/requirements.txt" >/dev/null
    done
}

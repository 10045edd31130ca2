#!/usr/bin/env bash
# Installs what the PostgreSQL backend needs and is missing: Debian's postgresql-15 and
# postgresql-server-dev-15, and pgvector built against PG 15 from Debian trixie's source
# package. trixie's sources are read through a private apt configuration under
# ${RAGDX_PG_APT:-/var/tmp/ragdx-pg-apt}: the machine's own apt sources are never edited.
# Idempotent: does nothing when pgvector is already installed for PG 15.
set -euo pipefail
PG_MAJOR=${PG_MAJOR:-15}
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive

have_vector() {
    [ -x "$PG_CONFIG" ] && [ -f "$("$PG_CONFIG" --sharedir)/extension/vector.control" ]
}
have_server() {
    [ -x "/usr/lib/postgresql/$PG_MAJOR/bin/postgres" ] && [ -x "$PG_CONFIG" ] \
        && [ -f "/usr/include/postgresql/$PG_MAJOR/server/postgres.h" ]
}

if have_server && have_vector; then
    exit 0
fi
if ! have_server || ! command -v dpkg-source >/dev/null || ! command -v make >/dev/null; then
    echo "installing postgresql-$PG_MAJOR and postgresql-server-dev-$PG_MAJOR" >&2
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q --no-install-recommends "postgresql-$PG_MAJOR" \
        "postgresql-contrib" "postgresql-server-dev-$PG_MAJOR" dpkg-dev make gcc >/dev/null
fi
if ! have_vector; then
    echo "building pgvector for PostgreSQL $PG_MAJOR from Debian trixie's source package" >&2
    apt_dir=${RAGDX_PG_APT:-/var/tmp/ragdx-pg-apt}
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/src"
    # a private apt configuration: trixie's deb-src only, its own lists and cache
    cat > "$apt_dir/sources.list" <<LIST
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
LIST
    opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=-"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1"
          -o "APT::Sandbox::User=root")
    apt-get "${opts[@]}" update -q >/dev/null
    (cd "$apt_dir/src" && rm -rf pgvector-* && apt-get "${opts[@]}" source -q pgvector >/dev/null)
    src=$(find "$apt_dir/src" -maxdepth 1 -type d -name 'pgvector-*' | head -n1)
    [ -n "$src" ] || { echo "pgvector's source package was not unpacked" >&2; exit 1; }
    # OPTFLAGS: no -march=native, so the build runs on any x86-64 machine of this kind
    make -s -C "$src" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" -j2 >/dev/null
    $SUDO make -s -C "$src" PG_CONFIG="$PG_CONFIG" install >/dev/null
fi
have_vector || { echo "pgvector is still not installed for PostgreSQL $PG_MAJOR" >&2; exit 1; }

#!/usr/bin/env bash
# Sets up what a fresh machine lacks, then runs every check of idem:
# formatting, lints, the rustdoc, the module layers, all tests, the no_std and wasm builds
# of the core, and fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> [%d s] %s\n' "$SECONDS" "$*"; }

step "toolchain: rust targets and components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
installed_targets=$(rustup target list --installed)
for target in wasm32-unknown-unknown thumbv7em-none-eabihf; do
  grep -qx "$target" <<<"$installed_targets" || rustup target add "$target"
done

step "curl, for the idem proxy scenario (cli/tests/proxy/curl-scenario.sh); python3, for scripts/module-cycles.py"
command -v curl >/dev/null || { apt-get update && apt-get install -y curl; }
command -v python3 >/dev/null || { apt-get update && apt-get install -y python3; }

step "PostgreSQL server binaries, for the tests that start their own servers (initdb, pg_ctl)"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { apt-get update && apt-get install -y postgresql; }
# As root, the tests run the servers as the `postgres` user (initdb refuses root); the
# package creates that user, a machine with the binaries but not the user gets it here.
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --home /var/lib/postgresql --shell /bin/bash postgres
fi

step "MariaDB server binaries, for the tests that start their own servers (mariadbd, mariadb-install-db, Galera, rsync)"
# idem-store's `mysql` feature (on in the workspace through idem-cli) tests on Debian's
# MariaDB; as root the servers run as the `mysql` user, which the package makes.
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || { apt-get update && apt-get install -y mariadb-server galera-4; }
# The Galera cluster's tests: the provider, and rsync for a joining node's state transfer.
[ -f /usr/lib/galera/libgalera_smm.so ] || { apt-get update && apt-get install -y galera-4; }
command -v rsync >/dev/null || { apt-get update && apt-get install -y rsync; }

step "Redis server, for the tests that start their own servers (redis-server, redis-cli)"
# idem-store's `redis` feature (on in the workspace through idem-cli) tests on Debian's
# Redis 7.0; each test starts its own server in a temporary directory.
command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || { apt-get update && apt-get install -y redis-server; }

step "cargo fmt --all --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps (and with idem-store's http feature)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --features idem-store/http

step "idem-store: no module import cycle; the engines apart on the seam (scripts/module-cycles.py)"
python3 scripts/module-cycles.py store/src --floor seam --engines file,postgres,mysql,redis

step "test-only features reach no product: none in the workspace's graph without dev-dependencies"
# idem-tests enables them through dev-dependencies only; a release build with them fails
# to compile (core/src/lib.rs, store/src/lib.rs). This shows `cargo build --workspace`
# resolves without them.
if cargo tree --workspace --locked -e normal,build,features | grep -E 'test-unguarded-deadline|test-unfloored-clock'; then
  echo "a test-only feature is enabled outside dev-dependencies" >&2
  exit 1
fi

step "cargo test --workspace"
cargo test --workspace

step "the outbox's HTTP transport (feature sender-http): clippy, a sender through a faulty receiver and two kills"
cargo clippy -p idem-store --all-targets --features sender-http -- -D warnings
cargo test -p idem-store --features sender-http --test sender

step "idem proxy with the otel feature (off by default): clippy, its unit tests, spans to an OTLP receiver"
cargo clippy -p idem-cli --all-targets --features otel -- -D warnings
cargo test -p idem-cli --features otel --bin idem --test otel

step "idem-wasm: npm package (wasm size vs budget), wasm tests in Node and Chromium, packed-package tests, browser end-to-end"
./scripts/wasm-tests.sh

step "idem-core builds for wasm32-unknown-unknown"
cargo build -p idem-core --target wasm32-unknown-unknown

step "idem-core builds no_std without default features for thumbv7em-none-eabihf"
cargo build -p idem-core --no-default-features --target thumbv7em-none-eabihf

step "fuzzing: every target of fuzz/ for ${IDEM_FUZZ_SECONDS:-25} s (nightly, cargo-fuzz)"
./scripts/fuzz.sh

step "all checks passed in $SECONDS s"

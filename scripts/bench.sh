#!/usr/bin/env bash
# The figures of docs/performance.md, on this machine, in one run: the store in process
# (`idem bench`), `idem proxy` under load, alone and as a fleet on PostgreSQL, MariaDB, Redis
# (bench/benches/http.rs), idem on PostgreSQL beside hand-written statements
# (bench/benches/postgres.rs) and on MariaDB (bench/benches/mariadb.rs), idem on Redis
# beside seed 004's guard (bench/benches/redis.rs), and the store beside SQLite
# (bench/benches/compare.rs).
# Prints figures only; nothing here asserts a speed.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "build (release)"
cargo build --release -p idem-cli
cargo bench -p idem-bench --bench http --no-run
cargo bench -p idem-bench --bench compare --features sqlite --no-run
cargo bench -p idem-bench --bench postgres --no-run
cargo bench -p idem-bench --bench mariadb --no-run
cargo bench -p idem-bench --bench redis --no-run

step "idem bench: the store in process"
./target/release/idem bench

step "idem proxy under load, alone on a file and as a fleet on PostgreSQL, MariaDB and Redis"
cargo bench -p idem-bench --bench http

step "idem on PostgreSQL beside the statements by hand, seed 004 and brandur's pattern"
cargo bench -p idem-bench --bench postgres

step "idem on MariaDB beside its statements by hand and seed 004's pattern"
cargo bench -p idem-bench --bench mariadb

step "idem on Redis beside its calls by hand and seed 004's guard"
cargo bench -p idem-bench --bench redis

step "idem-store beside SQLite"
cargo bench -p idem-bench --bench compare --features sqlite

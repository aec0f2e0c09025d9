#!/usr/bin/env bash
# Every test of the browser package idem-wasm, from a fresh machine:
#   1. the shared fingerprint vectors, natively (Rust)
#   2. wasm-bindgen tests in Node
#   3. wasm-bindgen tests in headless Chromium
#   4. the packed npm package installed into a scratch folder, with node:test
#      (vectors, client, receiver, helper, TypeScript types)
#   5. the Playwright end-to-end tests in Chromium against the Rust test server on idem-store's
#      tower layer
#      (tests/examples/e2e-server.rs): lost replies, reloads, several tabs, a leading tab
#      closed or crashed, the service worker sending with every page closed, and the upgrade
#      of a version 0.1 database
#   6. the Vite app of wasm/js/README.md (wasm/e2e/vite), built with Vite and served by
#      `vite preview` in front of `idem proxy` and an upstream that counts executions:
#      orders placed offline, reloaded offline from the service worker's shell, each
#      executed once back online (10 runs); an order unknown at the proxy stops as
#      `unknown`; and a page of an origin named by `idem proxy --cors-origin` reads a 409's
#      Retry-After and a 422's problem document
#   7. a benchmark, printed and not asserted: bytes written per change and the time of
#      `submit` with 0 and 2,000 intents queued
# Builds the package with scripts/wasm-package.sh first (which prints the .wasm size).
# Installs what is missing: Debian's chromium and chromium-driver, and from npm
# typescript, playwright-core and vite into the scratch folder (pinned below).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export PATH="$HOME/.cargo/bin:$PATH"

TYPESCRIPT_VERSION=5.9.3
PLAYWRIGHT_VERSION=1.64.1
VITE_VERSION=8.4.1

step() { printf '\n==> %s\n' "$*"; }

step "browser: chromium and chromium-driver"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver
fi
chromium_bin=$(command -v chromium)
chromedriver_bin=$(command -v chromedriver)

"$repo/scripts/wasm-package.sh"

metadata=$(cargo metadata --format-version 1 --no-deps)
target_dir=${CARGO_TARGET_DIR:-$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).target_directory)' <<<"$metadata")}
version=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).packages.find(p => p.name === "idem-wasm").version)' <<<"$metadata")
tarball=$target_dir/idem-wasm/idem-wasm-$version.tgz

step "1. fingerprint vectors, native Rust"
cargo test -p idem-wasm --test vectors

export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
step "2. wasm-bindgen tests in Node"
WASM_BINDGEN_TEST_ONLY_NODE=1 cargo test -p idem-wasm --target wasm32-unknown-unknown --test web

step "3. wasm-bindgen tests in headless Chromium"
# wasm/webdriver.json passes --headless --no-sandbox and the binary to chromedriver.
WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=$chromedriver_bin \
  cargo test -p idem-wasm --target wasm32-unknown-unknown --test web

step "4. the packed npm package, installed into a scratch folder (node:test)"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/idem-wasm-npm.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
printf '{ "name": "idem-wasm-scratch", "private": true, "type": "module" }\n' >"$scratch/package.json"
(cd "$scratch" && npm install --no-audit --no-fund --loglevel=error \
  "$tarball" "typescript@$TYPESCRIPT_VERSION" "playwright-core@$PLAYWRIGHT_VERSION" "vite@$VITE_VERSION")
mkdir -p "$scratch/test"
cp wasm/js/test/* "$scratch/test/"
(cd "$scratch" && IDEM_VECTORS="$repo/testdata/fingerprints.json" \
  node --test test/package.test.mjs test/sender.test.mjs test/types.test.mjs)

step "5. Playwright end-to-end tests in Chromium (Rust test server on idem-store's tower layer)"
cargo build -p idem-tests --example e2e-server
site=$scratch/site
mkdir -p "$site/pkg"
cp -r wasm/e2e/site/. "$site/"
# The page loads the package exactly as npm installed it.
cp -r "$scratch/node_modules/idem-wasm/." "$site/pkg/"
cp wasm/e2e/e2e.test.mjs wasm/e2e/bench.mjs "$scratch/test/"
export IDEM_E2E_SERVER="$target_dir/debug/examples/e2e-server" IDEM_E2E_SITE="$site" CHROMIUM="$chromium_bin"
(cd "$scratch" && node --test --test-concurrency=1 test/e2e.test.mjs)

step "6. the README's Vite app: vite preview, idem proxy, offline and back (Playwright in Chromium)"
cargo build -p idem-cli --bin idem
# The app sits in the scratch folder, whose node_modules holds idem-wasm and vite.
cp -r wasm/e2e/vite "$scratch/vite-app"
cp wasm/e2e/vite.test.mjs "$scratch/test/"
(cd "$scratch" && IDEM_BIN="$target_dir/debug/idem" IDEM_VITE_APP="$scratch/vite-app" \
  node --test --test-concurrency=1 test/vite.test.mjs)

step "7. benchmark: a queue of 2,000 intents in Chromium (printed, not asserted)"
(cd "$scratch" && node test/bench.mjs)

step "idem-wasm: all test layers passed"

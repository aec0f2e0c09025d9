#!/usr/bin/env bash
# Builds the npm package idem-wasm from this repository, packs it, and checks its .wasm:
# it fails (exit 1) when the .wasm is over its budget (150 KB raw, 60 KB gzipped), saying
# by how much, or imports anything from the module `env` (an accidental std or libc
# import that no browser provides), naming the imports.
#
#   scripts/wasm-package.sh      ->  <target>/idem-wasm/idem-wasm-<version>.tgz
#
# IDEM_WASM_BUDGET_RAW and IDEM_WASM_BUDGET_GZ replace the budget, in bytes (to try the
# check, or to measure a change that will move the budget).
#
# <target> is $CARGO_TARGET_DIR, else cargo's target directory of this workspace. The
# package holds one wasm-bindgen build for browsers and bundlers (ESM, `--target web`),
# one for Node (CommonJS, with an ESM entry), their TypeScript types, and the hand-written
# helpers `idem-wasm/browser` and `idem-wasm/worker` (wasm/js). Installs what a fresh
# machine lacks: the wasm32-unknown-unknown target, wasm-bindgen-cli at the version in
# Cargo.lock, and binaryen's wasm-opt from npm (Debian's binaryen is not used).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export PATH="$HOME/.cargo/bin:$PATH"

BINARYEN_VERSION=132.0.0
BUDGET_RAW=${IDEM_WASM_BUDGET_RAW:-$((150 * 1024))}
BUDGET_GZ=${IDEM_WASM_BUDGET_GZ:-$((60 * 1024))}

step() { printf '\n==> %s\n' "$*"; }

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "wasm-package: $tool is required (Node.js 20 or later)" >&2; exit 1; }
done

metadata=$(cargo metadata --format-version 1 --no-deps)
target_dir=${CARGO_TARGET_DIR:-$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).target_directory)' <<<"$metadata")}
version=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).packages.find(p => p.name === "idem-wasm").version)' <<<"$metadata")
bindgen_version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
out=$target_dir/idem-wasm
pkg=$out/pkg

step "tools: wasm32 target, wasm-bindgen-cli $bindgen_version, wasm-opt (binaryen $BINARYEN_VERSION)"
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
if [[ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $bindgen_version" ]]; then
  cargo install wasm-bindgen-cli --version "$bindgen_version"
fi
tools=$out/tools
wasm_opt=$tools/node_modules/.bin/wasm-opt
if [[ ! -x "$wasm_opt" ]] || [[ "$("$wasm_opt" --version)" != *"version_${BINARYEN_VERSION%%.*}"* ]]; then
  mkdir -p "$tools"
  npm install --prefix "$tools" --no-audit --no-fund --no-save "binaryen@$BINARYEN_VERSION" >/dev/null
fi

step "cargo build -p idem-wasm (profile wasm-release of the root Cargo.toml: opt-level z, fat LTO)"
cargo build -p idem-wasm --lib --target wasm32-unknown-unknown --profile wasm-release
wasm=$target_dir/wasm32-unknown-unknown/wasm-release/idem_wasm.wasm

step "wasm-bindgen: web (ESM for browsers and bundlers) and nodejs (CommonJS)"
rm -rf "$pkg"
mkdir -p "$pkg"
wasm-bindgen --target web --out-dir "$pkg/web" "$wasm"
wasm-bindgen --target nodejs --out-dir "$pkg/node" "$wasm"
named=$out/idem_wasm_named.wasm
cp "$pkg/web/idem_wasm_bg.wasm" "$named"
# --converge repeats -Oz until the module stops shrinking (measured: 0.2 KB gzipped);
# --gufa-optimizing infers the values that can reach each place in the whole module and
# folds what is then constant or dead (0.2 KB gzipped more);
# --one-caller-inline-max-function-size=30 inlines a function called from one place only
# when it is small: inlining them all (the default) leaves each export's shim one large
# body unlike any other, where separate functions repeat, and gzip finds repeats (measured:
# 2.4 KB gzipped less, 3.5 KB raw more; 20 or 50 save less).
for dir in web node; do
  "$wasm_opt" -Oz --converge --gufa-optimizing --one-caller-inline-max-function-size=30 --strip-debug --strip-producers --strip-target-features \
    "$pkg/$dir/idem_wasm_bg.wasm" -o "$pkg/$dir/idem_wasm_bg.wasm"
done

step "imports: nothing from the module env"
# An import from env is an accidental std or libc symbol: no browser or Node provides it,
# and the module fails to load.
for dir in web node; do
  env_imports=$(node -e '
    const bytes = require("fs").readFileSync(process.argv[1]);
    const imports = WebAssembly.Module.imports(new WebAssembly.Module(bytes));
    process.stdout.write(imports.filter((i) => i.module === "env").map((i) => `${i.name} (${i.kind})`).join(", "));
  ' "$pkg/$dir/idem_wasm_bg.wasm")
  if [[ -n "$env_imports" ]]; then
    echo "wasm-package: $dir/idem_wasm_bg.wasm imports from the module env: $env_imports" >&2
    exit 1
  fi
done
echo "none"

step "package files"
# The Node build is CommonJS inside a "type": "module" package.
printf '{ "type": "commonjs" }\n' >"$pkg/node/package.json"
# An ESM entry for Node with the same shape as the web build: named exports and an
# `init` that has nothing to do (the CommonJS build loads its wasm synchronously).
exports=$(node -e 'process.stdout.write(Object.keys(require(process.argv[1])).filter(n => !n.startsWith("__")).join(", "))' "$pkg/node/idem_wasm.js")
cat >"$pkg/node/index.mjs" <<EOF
// ESM entry of idem-wasm for Node: the CommonJS build, with the web build's init().
import wasm from "./idem_wasm.js";

export const { $exports } = wasm;
export default async function init() {
  return wasm;
}
export function initSync() {
  return wasm;
}
EOF
cat >"$pkg/node/index.d.mts" <<'EOF'
export * from "./idem_wasm.js";
/** Nothing to do in Node (the wasm loads on import); here so code can call it everywhere. */
export default function init(options?: unknown): Promise<unknown>;
export function initSync(options?: unknown): unknown;
EOF
cp wasm/js/idem-storage.js wasm/js/idem-sender.js wasm/js/idem-browser.js wasm/js/idem-browser.d.ts \
  wasm/js/idem-worker.js wasm/js/idem-worker.d.ts wasm/js/README.md "$pkg/"
node - "$pkg/package.json" "$version" <<'EOF'
const [file, version] = process.argv.slice(2);
const web = { types: "./web/idem_wasm.d.ts", default: "./web/idem_wasm.js" };
const cjs = { types: "./node/idem_wasm.d.ts", default: "./node/idem_wasm.js" };
const pkg = {
  name: "idem-wasm",
  version,
  description: "Idempotency keys for browser clients: one key per intent, kept across reconnects and reloads, reused by every retry (idem, in WebAssembly).",
  license: "MIT OR Apache-2.0",
  type: "module",
  main: "./node/idem_wasm.js",
  module: "./web/idem_wasm.js",
  browser: "./web/idem_wasm.js",
  types: "./web/idem_wasm.d.ts",
  exports: {
    ".": {
      node: { import: { types: "./node/index.d.mts", default: "./node/index.mjs" }, require: cjs },
      browser: web,
      import: web,
      require: cjs,
      default: web,
    },
    "./browser": { types: "./idem-browser.d.ts", default: "./idem-browser.js" },
    "./worker": { types: "./idem-worker.d.ts", default: "./idem-worker.js" },
    "./web/idem_wasm_bg.wasm": "./web/idem_wasm_bg.wasm",
    "./package.json": "./package.json",
  },
  files: [
    "web/",
    "node/",
    "idem-storage.js",
    "idem-sender.js",
    "idem-browser.js",
    "idem-browser.d.ts",
    "idem-worker.js",
    "idem-worker.d.ts",
    "README.md",
  ],
  engines: { node: ">=20" },
  keywords: ["idempotency", "idempotency-key", "retry", "wasm", "offline"],
};
require("fs").writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
EOF

step "npm pack"
rm -f "$out"/idem-wasm-*.tgz
(cd "$pkg" && npm pack --silent --pack-destination "$out" >/dev/null)
tarball=$out/idem-wasm-$version.tgz
test -f "$tarball"
echo "$tarball"

step "size of the package's .wasm (budget $BUDGET_RAW bytes raw, $BUDGET_GZ bytes gzipped)"
final=$pkg/web/idem_wasm_bg.wasm
raw=$(wc -c <"$final")
gz=$(gzip -9c "$final" | wc -c)
verdict() { if (($1 <= $2)); then echo "within budget"; else echo "OVER BUDGET by $(($1 - $2)) bytes"; fi; }
printf 'idem_wasm_bg.wasm: %d bytes raw (%.1f KB, %s), %d bytes gzipped (%.1f KB, %s)\n' \
  "$raw" "$(node -p "$raw/1024")" "$(verdict "$raw" "$BUDGET_RAW")" \
  "$gz" "$(node -p "$gz/1024")" "$(verdict "$gz" "$BUDGET_GZ")"
printf 'npm tarball: %d bytes\n' "$(wc -c <"$tarball")"
echo "What takes the space (before wasm-opt, by crate):"
node wasm/js/tools/size-report.mjs "$named" 10

step "budget"
failed=0
if ((raw > BUDGET_RAW)); then
  echo "wasm-package: idem_wasm_bg.wasm is $raw bytes, $((raw - BUDGET_RAW)) bytes over its budget of $BUDGET_RAW bytes raw" >&2
  failed=1
fi
if ((gz > BUDGET_GZ)); then
  echo "wasm-package: idem_wasm_bg.wasm is $gz bytes gzipped, $((gz - BUDGET_GZ)) bytes over its budget of $BUDGET_GZ bytes gzipped" >&2
  failed=1
fi
if ((failed)); then
  exit 1
fi
echo "within budget"

// Prints what takes the space in a .wasm: code bytes per crate (from the `name` section,
// so run it on wasm-bindgen's output before wasm-opt strips names) and the data segments.
// Usage: node size-report.mjs FILE.wasm [TOP]
import { readFileSync } from "node:fs";

const [file, top = "12"] = process.argv.slice(2);
const bytes = readFileSync(file);
let pos = 8;
const leb = () => {
  let result = 0, shift = 0, b;
  do {
    b = bytes[pos++];
    result += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return result;
};
const name = () => {
  const len = leb();
  const text = bytes.subarray(pos, pos + len).toString("utf8");
  pos += len;
  return text;
};

let imported = 0;
const bodies = [];
const names = new Map();
let dataBytes = 0;
let sections = 0;
while (pos < bytes.length) {
  const id = bytes[pos++];
  const size = leb();
  const end = pos + size;
  sections += size;
  if (id === 2) {
    for (let n = leb(); n > 0; n--) {
      name(); name();
      const kind = bytes[pos++];
      if (kind === 0) { leb(); imported++; }
      else if (kind === 1) { pos++; const flags = leb(); leb(); if (flags & 1) leb(); }
      else if (kind === 2) { const flags = leb(); leb(); if (flags & 1) leb(); }
      else if (kind === 3) { pos += 2; }
      else if (kind === 4) { pos++; leb(); }
    }
  } else if (id === 10) {
    for (let i = 0, n = leb(); i < n; i++) {
      const len = leb();
      bodies.push([imported + i, len]);
      pos += len;
    }
  } else if (id === 11) {
    dataBytes = size;
  } else if (id === 0 && name() === "name") {
    while (pos < end) {
      const sub = bytes[pos++];
      const len = leb();
      const subEnd = pos + len;
      if (sub === 1) for (let n = leb(); n > 0; n--) { const index = leb(); names.set(index, name()); }
      pos = subEnd;
    }
  }
  pos = end;
}

function crateOf(fn) {
  if (fn === undefined) return "(unnamed)";
  if (/wasm_bindgen|js_sys|externref|^__wbg|^__wbindgen/.test(fn)) return "wasm-bindgen glue";
  if (/serde|postcard/.test(fn)) return "serde + postcard";
  if (/^(mem(cpy|set|move|cmp)|__multi3|__ashl|__lshr)/.test(fn)) return "compiler builtins";
  if (/^[a-z]+_[a-zA-Z]+$/.test(fn) || /^[a-z][a-zA-Z]+$/.test(fn)) return "wasm-bindgen glue"; // export shims
  const cleaned = fn.replace(/\[[0-9a-f]+\]/g, "").replace(/^(<|&|impl |mut |dyn )+/g, "");
  const m = /^([A-Za-z_][A-Za-z0-9_]*)::/.exec(cleaned);
  const crate = m ? m[1] : "(other)";
  if (crate === "alloc" && /btree/.test(fn)) return "alloc (BTreeMap)";
  if ((crate === "core" || crate === "alloc") && /sort/.test(fn)) return "core (sorting)";
  if (crate === "core" && /fmt|panic/.test(fn)) return "core (fmt, panics)";
  if (crate === "core" && /dec2flt|FromStr/.test(fn)) return "core (float parsing)";
  if (/^(sha2|digest|block_buffer)$/.test(crate)) return "sha2";
  if (/^(dlmalloc|__rustc|__rdl)/.test(crate) || /raw_vec|rdl_/.test(fn)) return "allocator";
  if (crate === "idem_core" && /fingerprint/.test(fn)) return "idem_core (fingerprint, JSON)";
  return crate;
}

const perCrate = new Map();
let code = 0;
for (const [index, len] of bodies) {
  code += len;
  const crate = crateOf(names.get(index));
  perCrate.set(crate, (perCrate.get(crate) ?? 0) + len);
}
const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
console.log(`code ${kb(code)} in ${bodies.length} functions, data ${kb(dataBytes)} (ryu/float tables, messages)`);
if (names.size === 0) console.log("(no name section: run on wasm-bindgen's output, before wasm-opt)");
for (const [crate, len] of [...perCrate].sort((a, b) => b[1] - a[1]).slice(0, Number(top))) {
  console.log(`  ${kb(len).padStart(9)}  ${crate}`);
}

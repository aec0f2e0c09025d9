// The TypeScript types that ship in the package compile against real use, for ESM in
// Node (nodenext) and for bundlers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync, mkdirSync, copyFileSync } from "node:fs";
import { join } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const tsc = join(process.cwd(), "node_modules", ".bin", "tsc");

for (const resolution of ["nodenext", "bundler"]) {
  test(`types compile with moduleResolution ${resolution}`, () => {
    const dir = join(process.cwd(), `types-${resolution}`);
    mkdirSync(dir, { recursive: true });
    copyFileSync(join(here, "types-check.ts"), join(dir, "check.ts"));
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: "es2022",
          module: resolution === "nodenext" ? "nodenext" : "esnext",
          moduleResolution: resolution,
          // wasm-bindgen declares [Symbol.dispose]() on classes: TypeScript 5.2+ with this lib.
          lib: ["es2022", "dom", "esnext.disposable"],
          types: [],
          skipLibCheck: false,
        },
        files: ["check.ts"],
      }),
    );
    let output = "";
    try {
      output = execFileSync(tsc, ["-p", dir], { encoding: "utf8", stdio: "pipe" });
    } catch (error) {
      assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`);
    }
    assert.equal(output.trim(), "");
  });
}

#!/usr/bin/env python3
"""Finds import cycles between the modules of a crate's source tree.

    scripts/module-cycles.py store/src [--floor seam --engines file,postgres]

Every `crate::…` and `super::…` path outside comments (in `use` items and in code)
is an edge from the module of the file to the deepest module the path names. Exits 1
and prints each cycle when the graph has one; prints the module count otherwise.

With `--floor F --engines A,B,…`, also exits 1 when a module under one engine's folder
imports another engine's, or a module under the floor imports any engine: the engines
stand side by side on the floor.
"""

import re
import sys
from pathlib import Path


def module_of(root: Path, file: Path) -> tuple:
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def paths_in(line: str):
    """The `crate::` and `super::` paths of a line, groups `{a, b::c}` expanded."""
    for match in re.finditer(r"\b(crate|super)((?:::\w+)*)(::\{([^}]*)\})?", line):
        base = [match.group(1)] + [p for p in match.group(2).split("::") if p]
        if match.group(4) is not None:
            for item in match.group(4).split(","):
                item = item.strip().split(" as ")[0]
                if item:
                    yield base + [p for p in item.split("::") if p and p != "self"]
        else:
            yield base


def main() -> int:
    args = sys.argv[1:]
    root = Path(args[0] if args and not args[0].startswith("--") else "store/src")
    floor = args[args.index("--floor") + 1] if "--floor" in args else None
    engines = args[args.index("--engines") + 1].split(",") if "--engines" in args else []
    files = sorted(root.rglob("*.rs"))
    modules = {module_of(root, f) for f in files}
    edges = {m: set() for m in modules}
    # What the crate root re-exports (`pub use file::Store;`): `crate::Store` is an
    # import of the module that defines it, not of the root.
    reexports = {}
    for root_file in (root / "lib.rs", root / "main.rs"):
        if not root_file.exists():
            continue
        for line in root_file.read_text().splitlines():
            code = line.split("//", 1)[0]
            if not code.startswith("pub use "):
                continue
            for path in paths_in("crate::" + code[len("pub use "):].rstrip(";").strip()):
                if len(path) >= 3 and path[1] != "crate":
                    name = path[-1]
                    reexports[name] = list(path[1:-1])
    for file in files:
        here = module_of(root, file)
        in_tests = False
        for line in file.read_text().splitlines():
            code = line.split("//", 1)[0]
            if re.match(r"\s*#\[cfg\(test\)\]", line):
                in_tests = True  # unit tests may reach anywhere; they are not layers
            if in_tests or not code.strip():
                continue
            for path in paths_in(code):
                if path[0] == "crate":
                    target = path[1:]
                    if target and tuple(target[:1]) not in modules and target[0] in reexports:
                        target = reexports[target[0]] + target[1:]
                else:
                    target = list(here)
                    for part in path:
                        if part == "super":
                            target = target[:-1]
                        else:
                            target.append(part)
                # The deepest module the path names.
                while tuple(target) not in modules and target:
                    target = target[:-1]
                target = tuple(target)
                if target and target != here and not here[: len(target)] == target:
                    edges[here].add(target)
    # Tarjan's strongly connected components.
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(component)

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    name = lambda m: "::".join(m) or "crate"
    crossings = []
    for m in sorted(edges):
        for t in sorted(edges[m]):
            if not m or not t:
                continue
            if m[0] in engines and t[0] in engines and m[0] != t[0]:
                crossings.append(f"engine {m[0]} imports engine {t[0]}: {name(m)} -> {name(t)}")
            if floor and m[0] == floor and t[0] in engines:
                crossings.append(f"the floor {floor} imports engine {t[0]}: {name(m)} -> {name(t)}")
    for crossing in crossings:
        print(crossing)
    if cycles:
        for component in cycles:
            print("cycle:", ", ".join(sorted(name(m) for m in component)))
            for m in sorted(component):
                inside = sorted(name(t) for t in edges[m] if t in component)
                print(f"  {name(m)} -> {', '.join(inside)}")
        return 1
    if crossings:
        return 1
    apart = f"; {', '.join(engines)} apart on {floor}" if engines else ""
    print(f"{root}: {len(modules)} modules, no import cycle{apart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

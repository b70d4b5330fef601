#!/usr/bin/env python3
"""Import cycles between the modules (files) of each crate, and files too long.

A file is a module: `src/lib.rs` is the crate root, `src/a/mod.rs` or
`src/a.rs` is `a`, `src/a/b.rs` is `a::b`. File A depends on file B when A
names a path into B: `crate::a::b::X`, `super::X`, `self::b::X` or, in a
parent, `b::X` for a child module `b` it declares. Declaring a module and
re-exporting from it (`mod b;`, `pub use b::X;`) is a crate's face, not a
dependency, and is not counted. A cycle of dependencies between files of one
crate fails the check (issue 18: "no cycle inside any crate"), as does a
source file over MAX_LINES lines (after rustfmt), and a pure crate (PURE:
the compiler and the instruction layer, which make no system calls, so that
they can be tested anywhere) that depends on libc or libbpf-sys.

Usage: scripts/check_imports.py [--graph]   (exit 1 with each cycle printed)
"""

import re
import sys
from pathlib import Path

MAX_LINES = 1000
PURE = {"ebql-compiler": ("libc", "libbpf-sys"), "ebql-bpf": ("libc", "libbpf-sys")}
ROOT = Path(__file__).resolve().parent.parent

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
REEXPORT_RE = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+[^;]*;", re.M)
COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING_RE = re.compile(r'"(?:\\.|[^"\\])*"')


def module_of(src: Path, f: Path) -> tuple:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def strip(text: str) -> str:
    text = STRING_RE.sub('""', text)
    return COMMENT_RE.sub("", text)


def test_modules_removed(text: str) -> str:
    """Drops `#[cfg(test)] mod tests { … }` blocks: unit tests may use anything."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def resolve(modules: dict, base: tuple, rest: list):
    """The longest module path of `base + rest` that is a file of the crate."""
    best = None
    path = list(base)
    if tuple(path) in modules:
        best = tuple(path)
    for seg in rest:
        path.append(seg)
        if tuple(path) in modules:
            best = tuple(path)
        else:
            break
    return best


def crate_graph(src: Path):
    # src/main.rs is the binary, a crate of its own over the library: not a
    # module of the library's graph (its length is still checked).
    files = sorted(p for p in src.rglob("*.rs") if p != src / "main.rs")
    modules = {module_of(src, f): f for f in files}
    edges = {m: set() for m in modules}
    for mod, f in modules.items():
        raw = f.read_text()
        text = test_modules_removed(strip(raw))
        children = set(MOD_RE.findall(text))
        body = REEXPORT_RE.sub("", MOD_RE.sub("", text))
        is_dir_module = f.name in ("mod.rs", "lib.rs", "main.rs")
        here = mod if is_dir_module else mod  # the module's own path
        # the directory a `self::`/child path starts from
        def anchor(kind):
            if kind == "crate":
                return ()
            if kind == "self":
                return here
            return here[:-1]  # super

        refs = []
        for m in USE_GROUP_RE.finditer(body):
            prefix = [s for s in m.group(2).split("::") if s]
            for item in re.split(r",", m.group(3)):
                first = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", item)
                refs.append((m.group(1), prefix + first[:2]))
        for m in PATH_RE.finditer(body):
            refs.append((m.group(1), [s for s in m.group(2).split("::") if s]))
        for child in children:
            if re.search(r"(?<![:\w])" + child + r"::", body):
                refs.append(("self", [child]))
        for kind, rest in refs:
            target = resolve(modules, anchor(kind), rest)
            if target is not None and target != mod:
                # a file naming its own ancestor only for an item defined there
                edges[mod].add(target)
    return modules, edges


def cycles(edges: dict):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

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
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def name(m: tuple) -> str:
    return "::".join(m) or "(root)"


def main() -> int:
    show = "--graph" in sys.argv
    bad = 0
    for manifest in sorted(ROOT.glob("crates/*/Cargo.toml")):
        src = manifest.parent / "src"
        crate = manifest.parent.name
        modules, edges = crate_graph(src)
        if show:
            for m in sorted(edges):
                print(f"{crate}: {name(m)} -> {', '.join(name(t) for t in sorted(edges[m]))}")
        for comp in cycles(edges):
            bad += 1
            members = set(comp)
            print(f"{crate}: import cycle among {', '.join(name(m) for m in comp)}")
            for m in comp:
                inside = sorted(t for t in edges[m] if t in members)
                print(f"    {name(m)} -> {', '.join(name(t) for t in inside)}")
        deps = manifest.read_text().split("[dependencies]", 1)[-1].split("\n[", 1)[0]
        for banned in PURE.get(crate, ()):
            if re.search(r"^" + re.escape(banned) + r"\s*=", deps, re.M):
                bad += 1
                print(f"{crate}: depends on {banned}, but it is a pure crate (no system calls)")
        tests = sorted((manifest.parent / "tests").rglob("*.rs"))
        for f in sorted(src.rglob("*.rs")) + tests:
            n = sum(1 for _ in f.open())
            if n > MAX_LINES:
                bad += 1
                print(f"{f.relative_to(ROOT)}: {n} lines (at most {MAX_LINES}: split it by job)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

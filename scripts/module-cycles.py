#!/usr/bin/env python3
"""Checks that the modules inside each workspace crate import one way.

For every crate of the workspace it reads each module file (tests at the end
of a file, after `#[cfg(test)] mod tests`, left out), collects the modules
it names through `crate::a::b` and `super::x` paths, and builds the graph of
modules below the crate root (an edge from a module to its own ancestor or
descendant is containment, not an import, and is left out). It prints every
cycle it finds and exits 1 if there is one, so CI can run it.

Usage: scripts/module-cycles.py [--graph]   (--graph also prints the edges)
"""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def crates():
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=ROOT))
    for p in meta["packages"]:
        for t in p["targets"]:
            if "lib" in t["kind"]:
                yield p["name"], Path(t["src_path"])


def module_files(lib):
    src = lib.parent
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if rel.parts[0] == "bin":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        yield tuple(parts), f


def strip_tests(text):
    m = re.search(r"#\[cfg\(test\)\]\s*mod tests\b", text)
    text = text[: m.start()] if m else text
    # comments and doc comments name modules without importing them
    return re.sub(r"//[^\n]*", "", text)


def resolve(path, modules):
    """The longest prefix of `path` that is a module."""
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in modules:
            return tuple(path[:n])
    return None


def edges_of(mod, text, modules):
    out = set()
    for m in re.finditer(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)", text):
        segs = m.group(2).split("::")[1:]
        base = [] if m.group(1) == "crate" else list(mod[:-1])
        # `use crate::{a, b::c}` style groups are read one level deep
        target = resolve(base + segs, modules)
        if target is not None:
            out.add(target)
    for m in re.finditer(r"\b(crate|super)::\{([^}]*)\}", text):
        base = [] if m.group(1) == "crate" else list(mod[:-1])
        for item in m.group(2).split(","):
            segs = [s for s in item.strip().split("::") if s]
            if segs:
                target = resolve(base + segs, modules)
                if target is not None:
                    out.add(target)
    related = lambda a, b: a[: len(b)] == b or b[: len(a)] == a
    return {t for t in out if t and not related(t, mod)}


def cycles(graph):
    found, index, low, stack, on = [], {}, {}, [], set()
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main():
    show = "--graph" in sys.argv[1:]
    bad = 0
    for name, lib in crates():
        files = dict(module_files(lib))
        modules = set(files)
        graph = {}
        for mod, f in files.items():
            if not mod:
                continue  # the crate root re-exports; it is not an import
            graph[mod] = edges_of(mod, strip_tests(f.read_text()), modules)
            if show:
                for t in sorted(graph[mod]):
                    print(f"{name}: {'::'.join(mod)} -> {'::'.join(t)}")
        parents = {m[:k] for m in modules for k in range(len(m))}
        for parent in sorted(parents):
            k = len(parent)
            level = {}
            for a, targets in graph.items():
                if len(a) <= k or a[:k] != parent:
                    continue
                for b in targets:
                    if len(b) > k and b[:k] == parent and a[k] != b[k]:
                        level.setdefault(parent + (a[k],), set()).add(parent + (b[k],))
            for c in cycles(level):
                bad += 1
                print(f"{name}: module cycle: {' <-> '.join('::'.join(m) for m in c)}")
    print(f"module cycles: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Draws the workspace's crate graph from `cargo metadata` with graphviz.
#
#   scripts/crate-graph.sh [--all-edges] [--no-dev] [--dot] [OUT.svg]
#                                   (default OUT: docs/crates.svg)
#
# Only workspace crates are drawn, each with its directory (and binary, if
# it has one). An arrow A -> B means "A depends on B", so the operator's
# binaries are at the top and shm-proto at the bottom:
#   solid   a normal dependency. By default an edge that a longer path of
#           normal dependencies already implies is left out (transitive
#           reduction), so the picture shows the layers; --all-edges draws
#           every direct dependency.
#   dashed  a dev-dependency (tests and doc tests only), drawn only where no
#           path of normal dependencies already leads there; --no-dev omits
#           them.
# Build dependencies are never drawn. --dot prints the graphviz source on
# stdout instead of rendering.
#
# Needs python3 and graphviz's `dot` (apt-get install -y graphviz). The SVG
# is committed; rerun this after changing a Cargo.toml and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."

all_edges=0 dev=1 emit_dot=0 out=docs/crates.svg
while [ $# -gt 0 ]; do
  case "$1" in
    --all-edges) all_edges=1 ;;
    --no-dev) dev=0 ;;
    --dot) emit_dot=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "crate-graph.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    *) out="$1" ;;
  esac
  shift
done

if [ "$emit_dot" = 0 ] && ! command -v dot >/dev/null 2>&1; then
  echo "crate-graph.sh: graphviz's dot is missing; install it (apt-get install -y graphviz)" >&2
  exit 1
fi

graph=$(cargo metadata --no-deps --format-version 1 |
  ALL_EDGES=$all_edges DEV=$dev python3 -c '
import json, os, sys

meta = json.load(sys.stdin)
root = meta["workspace_root"]
members = {p["name"]: p for p in meta["packages"] if p["id"] in meta["workspace_members"]}

def directory(p):
    d = os.path.relpath(os.path.dirname(p["manifest_path"]), root)
    return d + "/"

# Fill colours by layer, bottom to top; a crate not listed is drawn white
# (every workspace crate is drawn, so a new one is never missing).
groups = [
    ("shared memory and drivers", "#e8f0fe", ["shm-proto", "sluice-ioctl"]),
    ("what a model is", "#e6f4ea", ["sluice-model", "sluice-stats"]),
    ("the device interface", "#fef7e0", ["sluice-gpu", "sluice-backend"]),
    ("policies, builders", "#fce8e6", ["sluice-sched", "sluice-nn"]),
    ("backends", "#f3e8fd", ["sluice-gpusim", "sluice-cuda"]),
    ("clients", "#e8f0fe", ["sluice-client"]),
    ("binaries", "#eeeeee", ["sluice-service", "sluice-bench", "sluice-cli"]),
    ("tests", "#ffffff", ["sluice-tests"]),
]
fill = {}
for _, colour, names in groups:
    for n in names:
        fill[n] = colour

normal, devdeps = {n: set() for n in members}, {n: set() for n in members}
for n, p in members.items():
    for d in p["dependencies"]:
        target = d["name"]
        if target not in members or target == n:
            continue
        if d["kind"] is None:
            normal[n].add(target)
        elif d["kind"] == "dev":
            devdeps[n].add(target)

def reach(start, skip_direct_to=None):
    """Crates reachable from start by normal edges (not using start -> skip_direct_to)."""
    seen, todo = set(), [t for t in normal[start] if t != skip_direct_to]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo.extend(normal[c])
    return seen

lines = [
    "digraph crates {",
    "  rankdir=TB; nodesep=0.35; ranksep=0.55;",
    "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11, margin=\"0.12,0.05\"];",
    "  edge [color=\"#555555\", arrowsize=0.7];",
]
for n in sorted(members):
    p = members[n]
    bins = [t["name"] for t in p["targets"] if "bin" in t["kind"]]
    label = n + "\\n" + directory(p)
    if bins:
        label += "\\nbinary: " + ", ".join(sorted(bins))
    extra = ", penwidth=2" if bins else ""
    lines.append("  \"%s\" [label=\"%s\", fillcolor=\"%s\"%s];" % (n, label, fill.get(n, "#ffffff"), extra))
for n in sorted(members):
    for t in sorted(normal[n]):
        if os.environ["ALL_EDGES"] == "1" or t not in reach(n, skip_direct_to=t):
            lines.append("  \"%s\" -> \"%s\";" % (n, t))
if os.environ["DEV"] == "1":
    for n in sorted(members):
        for t in sorted(devdeps[n]):
            if t not in normal[n] and t not in reach(n):
                lines.append("  \"%s\" -> \"%s\" [style=dashed, color=\"#999999\", constraint=false];" % (n, t))
lines.append("  labelloc=b; fontname=\"Helvetica\"; fontsize=10;")
lines.append("  label=\"A -> B: A depends on B. Solid: normal dependency%s.\\nDashed: dev-dependency (tests only). Drawn by scripts/crate-graph.sh from cargo metadata.\";" % (
    "" if os.environ["ALL_EDGES"] == "1" else " (edges a longer path implies are left out)"))
lines.append("}")
print("\n".join(lines))
')

if [ "$emit_dot" = 1 ]; then
  printf '%s\n' "$graph"
  exit 0
fi
mkdir -p "$(dirname "$out")"
printf '%s\n' "$graph" | dot -Tsvg -o "$out"
echo "wrote $out" >&2

#!/usr/bin/env python3
"""The product speaks of itself: no development history in what it ships.

Scans every tracked file (code, scripts, docs, README, configuration, shipped data under
data/ and agents/, and the text the binaries print, which lives in the code) for words that
belong to how sluice was developed rather than to what it does: a development stop, an
issue or a work-plan step with its number, a person on the team, a before-and-after account of
a fix, an unnamed machine ("this 2-core VM"), a work session.
History goes in CHANGELOG.md (not scanned); measurements go in the docs with their date,
machine and command, which is why a machine named as "a 2-core x86-64 VM" is fine and
"this 2-core VM" (whose?) is not. results/ holds raw device outputs as they were printed
and is not scanned.

A few uses of "step N" are the product's own vocabulary (a CUDA plan's numbered steps, an
algorithm's numbered steps quoted from its paper); they are listed in ALLOWED with the
reason, matched by file and line text, so a new use anywhere else fails.

Usage: scripts/check-wording.py           (exit 1 and a list of file:line: text on a hit)
"""

import re
import subprocess
import sys
from pathlib import Path

PATTERNS = [
    (re.compile(r"\bstop\s+#?\d+\b", re.I), "a development stop"),
    (re.compile(r"\bissues?\s+#?\d+\b", re.I), "an issue number"),
    (re.compile(r"\bstep\s+#?\d+\b", re.I), "a numbered work step"),
    (re.compile(r"\bthe" + r" lead\b", re.I), "a person on the team"),
    (re.compile(r"\bbefore the" + r" fix\b", re.I), "a before/after of development"),
    (re.compile(r"\bthis\s+(2|two)-core\s+(dev(elopment)?\s+)?VM\b", re.I), "an unnamed machine"),
    # "this session" is the client library's own word (a client's connection to the daemon).
    (re.compile(r"\b(last|next|previous|earlier|later)\s+session'?s?\b", re.I), "a work session"),
]

# (path, regex the line must match, why the use is the product's own vocabulary)
ALLOWED = [
    ("daemon/cuda/src/plan_exec.rs", r"step \d+ (does not exist|\(`)",
     "a CUDA plan is a list of numbered steps; its errors name the step"),
    ("daemon/inss/src/latency/lwr.rs", r"step [0-9] kept",
     "the numbered steps of the latency-model fit the module documents"),
    ("docs/hardware.md", r"\bstep [0-9]\b",
     "the numbered commands of the device run listed on the same page"),
    ("kmod-patches/README.md", r"\b[Ss]tep [0-9]\b",
     "the numbered install steps of the same page"),
    ("scripts/test-all.sh", r"skip step [0-9]",
     "the numbered stages listed at the top of the same script"),
    ("scripts/check-wording.py", r".",
     "this file names the patterns"),
]

SKIP_PREFIXES = ("CHANGELOG.md", "results/", "Cargo.lock", "fuzz/corpus/", "fuzz/artifacts/")
SKIP_SUFFIXES = (".svg", ".png", ".safetensors", ".onnx", ".bin", ".lock")


def tracked_files(root: Path):
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                         capture_output=True).stdout
    for name in out.decode().split("\0"):
        if name and not name.startswith(SKIP_PREFIXES) and not name.endswith(SKIP_SUFFIXES):
            yield name


# What opens a continued comment or quoted line, dropped when two lines are read as one.
CONTINUATION = re.compile(r"^\s*(//[/!]?|#+|\*|>|--|;+)?\s*")


def joined_pairs(lines):
    """Each line with the next one's text after its comment marker, so that a phrase
    wrapped across two lines ("... issue" / "//! 14's ...") is read whole."""
    for no in range(len(lines) - 1):
        nxt = CONTINUATION.sub("", lines[no + 1], count=1)
        yield no + 1, lines[no].rstrip() + " " + nxt


def allowed(path: str, line: str) -> bool:
    return any(path == p and re.search(rx, line) for p, rx, _ in ALLOWED)


def self_test() -> None:
    """The patterns catch what they are for and pass the product's own words."""
    # Built from parts, so that this file does not itself read as what it looks for.
    n = 30
    bad = [f"fixed in stop {n}", f"see issue #{n} item 7", f"B=8 (before stop {n})",
           "as the " + "lead asked", "p99 before the " + "fix", "measured on this 2-core VM",
           "left for the next session"]
    good = ["stop the daemon", "a 2-core x86-64 VM", "the model looked up on this session",
            "step the clock", "issued 30 requests", "one stop-the-world pass"]
    for line in bad:
        assert any(rx.search(line) for rx, _ in PATTERNS), f"pattern misses {line!r}"
    for line in good:
        assert not any(rx.search(line) for rx, _ in PATTERNS), f"pattern flags {line!r}"
    wrapped = ["//! the comparison of issue", f"//! {n}'s repartition"]
    assert any(rx.search(j) for _, j in joined_pairs(wrapped) for rx, _ in PATTERNS), \
        "a phrase wrapped across two comment lines is missed"


def main() -> int:
    self_test()
    root = Path(__file__).resolve().parent.parent
    hits = []
    scanned = 0
    for path in tracked_files(root):
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        scanned += 1
        lines = text.splitlines()
        for no, line in enumerate(lines, 1):
            for rx, what in PATTERNS:
                if rx.search(line) and not allowed(path, line):
                    hits.append(f"{path}:{no}: {what}: {line.strip()[:160]}")
        for no, pair in joined_pairs(lines):
            for rx, what in PATTERNS:
                if (rx.search(pair) and not rx.search(lines[no - 1]) and not rx.search(lines[no])
                        and not allowed(path, pair)):
                    hits.append(f"{path}:{no}-{no + 1}: {what}: {pair.strip()[:160]}")
    if hits:
        print("development history in the product (say what the code does; history goes in "
              "CHANGELOG.md, measurements in the docs with date, machine and command):")
        print("\n".join(hits))
        return 1
    print(f"wording: {scanned} tracked files, no development history outside CHANGELOG.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

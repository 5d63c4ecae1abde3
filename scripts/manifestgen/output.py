"""Stable manifest text and the write-or---check step of both generators."""

import json
import os
import sys


def render(m):
    """Stable formatting: one key per line, one kernel per line."""
    out = ["{"]
    for key, value in m.items():
        if key == "kernels":
            if not value:
                out.append(' "kernels": []')
                continue
            out.append(' "kernels": [')
            rows = ["  " + json.dumps(k, separators=(", ", ": ")) for k in value]
            out.append(",\n".join(rows))
            out.append(" ]")
        else:
            out.append(f" {json.dumps(key)}: {json.dumps(value)},")
    return "\n".join(out) + "\n}\n"


def write_or_check(files, out_dir, check, regenerate):
    """Writes `files` ({model name: manifest text}) as `out_dir/<name>.json`,
    or with `check` writes nothing and names every file that differs.
    `regenerate` is the command that rewrites them, for the message.
    Returns the exit status: 0, or 1 if `check` found a stale file."""
    stale = []
    for name, text in files.items():
        path = os.path.join(out_dir, f"{name}.json")
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != text:
                stale.append(path)
            continue
        os.makedirs(out_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print(f"wrote {os.path.normpath(path)}")
    for p in stale:
        print(f"stale: {os.path.normpath(p)} (run {regenerate})", file=sys.stderr)
    return 1 if stale else 0

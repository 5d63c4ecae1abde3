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


# Keys a generator does not produce but `sluice split MODEL --out FILE`
# adds to a manifest (docs/split.md): kept from the committed file, so that
# regenerating a manifest does not drop them.
KEPT_KEYS = ("splits",)


def keep_entries(text, path):
    """`text` (a rendered manifest) with the KEPT_KEYS of the file at
    `path`, if it exists and has them, inserted before "kernels"."""
    try:
        with open(path, encoding="utf-8") as f:
            current = json.load(f)
    except FileNotFoundError:
        return text
    for key in KEPT_KEYS:
        if key in current:
            marker = '\n "kernels": '
            if marker not in text:
                raise ValueError(f"{path}: rendered manifest has no kernels line")
            line = f"\n {json.dumps(key)}: {json.dumps(current[key])},"
            text = text.replace(marker, line + marker, 1)
    return text


def write_or_check(files, out_dir, check, regenerate):
    """Writes `files` ({model name: manifest text}) as `out_dir/<name>.json`,
    or with `check` writes nothing and names every file that differs.
    Entries of KEPT_KEYS in the committed files are carried over.
    `regenerate` is the command that rewrites them, for the message.
    Returns the exit status: 0, or 1 if `check` found a stale file."""
    stale = []
    for name, text in files.items():
        path = os.path.join(out_dir, f"{name}.json")
        text = keep_entries(text, path)
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

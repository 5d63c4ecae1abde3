"""Byte-range sets and minimal idempotent groups (REEF §4.4).

A port of `minimal_groups` in daemon/model/src/idempotent.rs. The Rust test
`sluice_model::manifest::tests::group_starts_are_current` recomputes every
shipped manifest's groups with the Rust checker and fails if this port ever
disagrees.
"""

ALIGN = 256


def align(n):
    """`n` rounded up to a multiple of ALIGN (256 bytes)."""
    return -(-n // ALIGN) * ALIGN


def rs(ranges):
    """Canonical range set: sorted, merged, non-empty (start, end) pairs."""
    v = sorted((a, b) for a, b in ranges if b > a)
    merged = []
    for a, b in v:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def rs_diff(x, y):
    """The bytes of range set `x` not in range set `y`."""
    out = []
    for a, b in x:
        cur = a
        for c, d in y:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def rs_meets(x, y):
    """Whether range sets `x` and `y` share a byte."""
    return any(max(a, c) < min(b, d) for a, b in x for c, d in y)


def minimal_groups(acc):
    """Start of the minimal idempotent group ending at each kernel.

    `acc[k]` = (reads, writes) of kernel k, each a list of [start, end)
    byte ranges. Grows the group backwards until its inputs and outputs are
    disjoint.
    """
    starts = []
    for k, (r, w) in enumerate(acc):
        inputs, outputs, i = rs(r), rs(w), k
        while rs_meets(inputs, outputs):
            assert i > 0, f"kernel {k} has no idempotent group"
            i -= 1
            ri, wi = acc[i]
            inputs = rs(ri + rs_diff(inputs, rs(wi)))
            outputs = rs(outputs + wi)
        starts.append(i)
    return starts

"""The order bench runs one prompt's modes in."""


#: how measure_prompt orders the modes: "williams" since this was written (recorded in a
#: results file's settings as "mode_order"); a file without it ran "rotate"
MODE_ORDER = "williams"


def williams_orders(n: int) -> list[list[int]]:
    """A Williams design over n modes: n orders (2n where n is odd) in which every mode runs in
    every place equally often and every mode runs right after every other equally often, so
    whatever one mode leaves behind (a warm cache, a hot core) lands on each other mode alike.
    For odd n its first n orders are the rotations, then their reverses."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:      # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(m + r) % n for m in first] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def mode_order(modes: list[str], index: int, scheme: str = MODE_ORDER) -> list[str]:
    """The order measure_prompt runs the modes in for the index-th prompt of a run (counted
    from 1 over prompts and repetitions). "williams": the index-th order of williams_orders,
    cyclically; "rotate" (results files written before settings held "mode_order"): rotated by
    index, so the mode that goes first changes from prompt to prompt, but with three modes
    the same mode always follows a given one."""
    if scheme == "rotate":
        i = index % len(modes)
        return modes[i:] + modes[:i]
    if scheme != "williams":
        raise ValueError(f"unknown mode order {scheme!r}")
    orders = williams_orders(len(modes))
    return [modes[i] for i in orders[index % len(orders)]]

"""What a first touch of memory costs on this machine: the time per 4 KiB page of each
GiB of new anonymous memory touched a byte per page (huge pages off), freed, touched
again at once, and again after a pause. On a VM whose host takes freed memory back (free
page reporting, docs/scale.md "Fresh memory") a page the host no longer backs costs a
fault to the host, and a benchmark that touches fresh memory pays it::

    python benches/page_faults.py --gib 8 --pause 20

Each pass maps ``--gib`` GiB one GiB at a time, touches every page and prints the time per
page of each GiB, then frees it all.
"""

from __future__ import annotations

import argparse
import mmap
import time

import numpy as np

GIB = 1 << 30


def touch_pass(gib: int) -> list[float]:
    """Maps and touches ``gib`` GiB, one at a time; microseconds per page of each; frees."""
    held, per_page = [], []
    for _ in range(gib):
        m = mmap.mmap(-1, GIB)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        view = np.frombuffer(m, dtype=np.uint8)
        t = time.perf_counter()
        view[:: mmap.PAGESIZE] = 1
        per_page.append((time.perf_counter() - t) / (GIB // mmap.PAGESIZE) * 1e6)
        del view
        held.append(m)
    for m in held:
        m.close()
    return per_page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=int, default=4, help="GiB per pass (1 or more)")
    ap.add_argument("--pause", type=float, default=20.0, help="seconds before the last pass")
    args = ap.parse_args()
    if args.gib < 1:
        ap.error("--gib: give 1 or more")
    if not (0 <= args.pause < float("inf")):
        ap.error("--pause: give a finite number of seconds, 0 or more")
    for name, wait in (("first", 0.0), ("again at once", 0.0), ("after the pause", args.pause)):
        time.sleep(wait)
        us = touch_pass(args.gib)
        print(f"{name}: " + ", ".join(f"{x:.2f}" for x in us) + " us per 4 KiB page, by GiB")


if __name__ == "__main__":
    main()

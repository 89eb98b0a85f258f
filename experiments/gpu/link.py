"""Measures the host link with PyTorch: bandwidth and latency by size, each way
alone and both ways at once, from pinned and from pageable host memory.

    python experiments/gpu/link.py [-o link.json]

Each figure is the median of ``repeats`` timed copies (CUDA events on the copy's
stream) after one warm-up. ``duplex`` runs an H2D and a D2H copy of the same size
on two streams at once and reports each direction's rate while both ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

SIZES = [2**k for k in range(12, 31, 2)]  # 4 KiB .. 1 GiB


def _timed(torch, fn, stream) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(stream)
    with torch.cuda.stream(stream):
        fn()
    b.record(stream)
    b.synchronize()
    return a.elapsed_time(b) / 1e3


def measure(sizes=SIZES, repeats: int = 5) -> dict:
    import torch

    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    rows = []
    for n in sizes:
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        dev2 = torch.empty(n, dtype=torch.uint8, device="cuda")
        for pinned in (True, False):
            host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
            host2 = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
            row = {"bytes": n, "pinned": pinned}
            for name, fn in (
                ("h2d", lambda d=dev, h=host: d.copy_(h, non_blocking=True)),
                ("d2h", lambda d=dev, h=host: h.copy_(d, non_blocking=True)),
            ):
                fn()
                torch.cuda.synchronize()
                t = statistics.median(_timed(torch, fn, s1) for _ in range(repeats))
                row[f"{name}_s"] = t
                row[f"{name}_bytes_per_s"] = n / t
            ts = []
            for _ in range(repeats):
                torch.cuda.synchronize()
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                ev[0].record(s1)
                ev[2].record(s2)
                with torch.cuda.stream(s1):
                    dev.copy_(host, non_blocking=True)
                with torch.cuda.stream(s2):
                    host2.copy_(dev2, non_blocking=True)
                ev[1].record(s1)
                ev[3].record(s2)
                torch.cuda.synchronize()
                ts.append((ev[0].elapsed_time(ev[1]) / 1e3, ev[2].elapsed_time(ev[3]) / 1e3))
            row["duplex_h2d_bytes_per_s"] = n / statistics.median(t[0] for t in ts)
            row["duplex_d2h_bytes_per_s"] = n / statistics.median(t[1] for t in ts)
            rows.append(row)
        dev = dev2 = None  # give the memory back before the next size
    return {"sizes": rows, "device_name": torch.cuda.get_device_name()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", default="link.json")
    args = ap.parse_args()
    res = measure()
    with open(args.output, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

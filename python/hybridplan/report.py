"""Reports: a text table, pictures of memory and of the streams, one HTML page."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ._files import write_all
from .planning import Plan

__all__ = [
    "fmt_bytes",
    "fmt_count",
    "html_report",
    "memory_figure",
    "report_files",
    "streams_figure",
    "summary_table",
    "write_report",
]


def fmt_count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 tensor``, ``3 tensors``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units, e.g. ``31.4 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


_ROWS = [
    ("peak device memory", "peak_bytes", fmt_bytes),
    ("predicted step time", "step_time_s", fmt_time),
    ("exposed transfer (stall)", "stall_time_s", fmt_time),
    ("recompute time", "recompute_time_s", fmt_time),
    ("bytes to host", "bytes_d2h", fmt_bytes),
    ("bytes to device", "bytes_h2d", fmt_bytes),
    ("swapped tensors", "swaps", str),
    ("swap-ins", "swap_ins", str),
    ("recompute clones", "clones", str),
]


def fmt_size(n: int) -> str:
    """Bytes exactly and in binary units, e.g. ``33716224 bytes (32.2 MiB)``."""
    return f"{n} bytes ({fmt_bytes(n)})" if n >= 1024 else f"{n} bytes"


def summary_table(
    plans: Mapping[str, Plan | None],
    budget: int | None = None,
    original: Mapping | None = None,
    best: tuple[int, str] | None = None,
) -> str:
    """Original vs each plan, one column each (``None``: no plan fits).

    ``original`` gives the original step's figures when no plan carries them
    (nothing fits); ``best`` the smallest peak reached and its strategy, printed
    under the table when no plan fits.
    """
    first = next((p for p in plans.values() if p is not None), None)
    cols: list[tuple[str, dict | None]] = []
    base_figures = first.report["original"] if first is not None else original
    if base_figures is not None:
        cols.append(("original", dict(base_figures)))
    cols += [(name, p.report["planned"] if p else None) for name, p in plans.items()]
    head = ["", *[c[0] for c in cols]]
    rows = [head]
    for label, key, fmt in _ROWS:
        rows.append([label, *[fmt(c[1][key]) if c[1] else "no plan fits" for c in cols]])
    if base_figures is not None and base_figures["step_time_s"] > 0:
        base = base_figures["step_time_s"]
        rows.append(
            [
                "slowdown vs original",
                *[f"{c[1]['step_time_s'] / base:.3f}x" if c[1] else "-" for c in cols],
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    if budget is not None:
        lines.insert(0, f"budget: {fmt_bytes(budget)}")
    if best is not None and first is None:
        lines.append(
            f"no strategy fits; the smallest peak reached is {fmt_bytes(best[0])} "
            f"({best[0]} bytes, strategy {best[1]!r}): raise the budget to at least that"
        )
    return "\n".join(lines)


def memory_figure(plan: Plan, measured: tuple[np.ndarray, np.ndarray] | None = None):
    """Device memory over one step: original, plan, budget (and a measured curve)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if measured is None:
        fig, ax = plt.subplots(figsize=(9, 4.2))
        axes = [ax]
    else:
        # The measured curve runs on a different clock (the CPU's, not the device
        # model's): its own axes, the same memory scale.
        fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharey=True)
        ax = axes[0]
    top = max(plan.budget, plan.original["peak_bytes"])
    unit, scale = next(
        (u, s)
        for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
        if top >= 2 * s or s == 1
    )
    for which, style in (("original", "--"), ("planned", "-")):
        t, b = plan.timeline(which)
        ax.step(t * 1e3, b / scale, style, where="post", label=f"{which} (predicted)")
    ax.axhline(plan.budget / scale, color="red", lw=1, label="budget")
    ax.set_xlabel(f"predicted time in the step on {plan.report['device']} (ms)")
    ax.set_ylabel(f"device memory ({unit})")
    ax.set_title(
        f"device memory, {plan.report['strategy_requested']} plan "
        f"on {plan.report['device']} (predicted)"
    )
    ax.legend(loc="upper left", fontsize=8)
    if measured is not None:
        m = axes[1]
        m.step(
            measured[0] * 1e3,
            measured[1] / scale,
            "-",
            where="post",
            color="tab:green",
            label="planned (measured)",
        )
        m.axhline(plan.budget / scale, color="red", lw=1, label="budget")
        m.set_xlabel("measured wall-clock time in the step on this machine (ms)")
        m.set_ylabel(f"device memory ({unit})")
        m.set_title("device memory of the rewritten step, measured")
        m.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def streams_figure(plan: Plan):
    """The compute stream and both copy engines over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds, starts, ends = plan.events()
    lanes = {
        0: ("compute", "tab:blue"),
        1: ("compute", "tab:orange"),
        2: ("device->host", "tab:green"),
        3: ("host->device", "tab:purple"),
    }
    ypos = {"compute": 2, "device->host": 1, "host->device": 0}
    names = {0: "op", 1: "recompute clone", 2: "swap-out copy", 3: "swap-in copy"}
    fig, ax = plt.subplots(figsize=(9, 2.6))
    for k, (lane, color) in lanes.items():
        sel = kinds == k
        if sel.any():
            ax.broken_barh(
                list(zip(starts[sel] * 1e3, (ends[sel] - starts[sel]) * 1e3, strict=True)),
                (ypos[lane] - 0.4, 0.8),
                color=color,
                edgecolor="white" if k >= 2 else None,  # one box per copy
                linewidth=0.6,
                label=names[k],
            )
    ax.set_yticks(list(ypos.values()), list(ypos.keys()))
    ax.set_xlabel("predicted time in the step (ms)")
    ax.set_title("streams of the planned step")
    if len(set(kinds.tolist())) > 1:  # a legend only names what is drawn
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the lanes
    fig.tight_layout()
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def html_report(
    plans: Mapping[str, Plan | None],
    main: str,
    pngs: Mapping[str, bytes],
    notes: Sequence[str] = (),
) -> str:
    """One self-contained page: the table, ``notes`` (e.g. measured figures),
    the pictures, the decisions of ``main``."""
    p = plans[main]
    imgs = "".join(
        f'<h2>{html.escape(name)}</h2><img alt="{html.escape(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(data).decode()}">'
        for name, data in pngs.items()
    )
    rows = []
    if p is not None:
        for s in p.swaps:
            rows.append(
                f"<tr><td>swap</td><td>{html.escape(s['tensor'])}</td>"
                f"<td>{fmt_bytes(s['bytes'])}</td><td>{html.escape(s['reason'])}</td></tr>"
            )
        for r in p.recomputes:
            rows.append(
                f"<tr><td>recompute</td><td>{html.escape(', '.join(r['names'][:6]))}"
                f"{' ...' if len(r['names']) > 6 else ''}</td><td></td>"
                f"<td>{html.escape(r['reason'])}</td></tr>"
            )
    table = html.escape(summary_table(plans, p.budget if p else None))
    return (
        "<!doctype html><meta charset='utf-8'><title>hybridplan report</title>"
        "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}"
        "td{border-bottom:1px solid #ddd;padding:2px 6px;font-size:13px}</style>"
        f"<h1>hybridplan report</h1><pre>{table}</pre>"
        + (f"<pre>{html.escape(chr(10).join(notes))}</pre>" if notes else "")
        + f"{imgs}"
        f"<h2>decisions of the {html.escape(main)} plan</h2>"
        f"<table><tr><th>kind</th><th>what</th><th>bytes</th><th>why</th></tr>{''.join(rows)}</table>"
    )


#: The files a report directory holds (:func:`report_files`).
REPORT_FILES = ("memory.png", "streams.png", "plan.json", "report.html")


def report_files(
    plans: Mapping[str, Plan | None],
    main: str,
    out_dir: str | Path,
    measured: tuple[np.ndarray, np.ndarray] | None = None,
    notes: Sequence[str] = (),
) -> dict[Path, bytes]:
    """The files of :func:`write_report`, rendered in memory: ``{path: bytes}``."""
    out = Path(out_dir)
    p = plans[main]
    files: dict[Path, bytes] = {}
    pngs: dict[str, bytes] = {}
    if p is not None and p._timelines is not None:
        pngs["device memory"] = _png(memory_figure(p, measured))
        pngs["streams"] = _png(streams_figure(p))
        files[out / "memory.png"] = pngs["device memory"]
        files[out / "streams.png"] = pngs["streams"]
        files[out / "plan.json"] = p.to_json().encode()
    files[out / "report.html"] = html_report(plans, main, pngs, notes).encode()
    return files


def write_report(
    plans: Mapping[str, Plan | None],
    main: str,
    out_dir: str | Path,
    measured: tuple[np.ndarray, np.ndarray] | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """Writes memory.png, streams.png, report.html and plan.json into ``out_dir``
    (created if missing), all or none.

    ``measured`` is a measured ``(seconds, device bytes)`` curve of the planned
    step, drawn below the predicted ones on its own time axis; ``notes`` are
    lines of text placed under the table.
    """
    files = report_files(plans, main, out_dir, measured, notes)
    write_all(files)
    return {path.name: path for path in files}

"""The whole GPU run, in one command, within a time budget (default 7.5 minutes):

    python experiments/gpu/run_gpu.py --replays experiments/gpu/out -o results.json

1. link calibration (``link.py``): H2D, D2H and duplex, pinned and pageable, by size;
2. for each workload of ``manifest.json`` (``prepare.py``): the unplanned step
   (``none``: per-op kernel times at the workload's shapes) and the ``swap``,
   ``recompute`` and ``hybrid`` plans, each played by ``runner.py`` (median of 3
   steps after a warm-up);
3. writes one results JSON (after every part, so a run cut short keeps what it
   measured), from which ``make_docs.py`` writes docs/gpu.md and ``device_file.py``
   a measured device description.

Needs PyTorch with CUDA and numpy only.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "replay"))  # the player

import link
import runner

ORDER = ("none", "swap", "recompute", "hybrid")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replays", default=str(Path(__file__).parent / "out"))
    ap.add_argument("-o", "--output", default="results.json")
    ap.add_argument("--budget-s", type=float, default=450.0, help="stop starting parts after this")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    t0 = time.perf_counter()
    folder = Path(args.replays)
    manifest = json.loads((folder / "manifest.json").read_text())
    res: dict = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "manifest": manifest,
        "runs": {},
        "errors": [],
        "skipped": [],
    }

    def save() -> None:
        res["elapsed_s"] = round(time.perf_counter() - t0, 1)
        Path(args.output).write_text(json.dumps(res, indent=1))

    try:
        res["link"] = link.measure()
    except Exception:  # a measurement that fails is reported, the rest still runs
        res["errors"].append({"part": "link", "error": traceback.format_exc()[-2000:]})
    save()
    for name, w in manifest["workloads"].items():
        res["runs"][name] = {}
        for strategy in ORDER:
            file = w["replays"].get(strategy)
            if file is None:
                continue
            if time.perf_counter() - t0 > args.budget_s:
                res["skipped"].append(f"{name}-{strategy}")
                continue
            try:
                replay = json.loads((folder / file).read_text())
                res.setdefault("preset", replay["device"])
                out = runner.play(replay, "cuda", args.repeats)
                if strategy == "none":
                    out["profile"] = {
                        str(o["node"]): o["measured_s"] for o in out["per_op"] if not o["clone"]
                    }
                res["runs"][name][strategy] = out
            except Exception:
                res["errors"].append(
                    {"part": f"{name}-{strategy}", "error": traceback.format_exc()[-2000:]}
                )
            gc.collect()
            torch.cuda.empty_cache()
            save()
    save()
    print(
        f"wrote {args.output} in {res['elapsed_s']} s; "
        f"errors: {len(res['errors'])}, skipped: {res['skipped']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

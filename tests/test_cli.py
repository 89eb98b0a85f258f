"""The command line: commands, outputs, exit codes, atomic writes."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from tensorflow.core.framework import graph_pb2

import hybridplan
from hybridplan import _files
from hybridplan._backend import workspace_rule
from hybridplan.cli import EXIT_BAD_INPUT, EXIT_BUDGET, main

FIXTURE = pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb"


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "synth.pb"
    path.write_bytes(hybridplan.synthetic_graphdef(5_000, "residual", batch=4, size=16))
    # The plans below are for GPU presets (a100-pcie4, the default v100-nvlink2): half
    # of the peak under their workspace rule, not the CPU kernels' this analysis would
    # otherwise model (with oneDNN off their scratch doubles the peak, and half of that
    # is more than the GPU plan's whole peak).
    rule = workspace_rule("auto", hybridplan.device_model("v100-nvlink2"))
    assert rule == workspace_rule("auto", hybridplan.device_model("a100-pcie4"))
    a = hybridplan.analyze(path, workspace=rule)
    half = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) // 2
    return path, a, half


def test_analyze(capsys):
    assert main(["analyze", str(FIXTURE), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "peak:" in out and "persistent:" in out and "forward" in out
    assert out.count("float32") >= 3


def test_plan_writes_graph_json_and_report(synth, tmp_path, capsys):
    path, a, half = synth
    out, js, rep = tmp_path / "out.pb", tmp_path / "plan.json", tmp_path / "rep"
    code = main(
        [
            "plan",
            str(path),
            "--budget",
            str(half),
            "--device",
            "a100-pcie4",
            "-o",
            str(out),
            "--json",
            str(js),
            "--report",
            str(rep),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "peak device memory" in text and "predicted step time" in text
    gd = graph_pb2.GraphDef.FromString(out.read_bytes())
    assert len(gd.node) > a.num_nodes
    plan = hybridplan.Plan.load(js)
    assert plan.planned.peak_bytes <= half
    for f in ("report.html", "memory.png", "streams.png", "plan.json"):
        assert (rep / f).stat().st_size > 1000
    assert (rep / "memory.png").read_bytes()[:4] == b"\x89PNG"
    assert "<img" in (rep / "report.html").read_text()


def test_compare_lists_every_strategy(synth, capsys):
    path, _, half = synth
    assert main(["compare", str(path), "--budget", str(half), "--device", "h100-pcie5"]) == 0
    head = capsys.readouterr().out.splitlines()[1]
    for s in hybridplan.STRATEGIES:
        assert s in head


def test_unreachable_budget_exits_5_and_writes_nothing(synth, tmp_path, capsys):
    path, a, _ = synth
    out = tmp_path / "out.pb"
    code = main(["plan", str(path), "--budget", str(a.persistent_bytes + 1), "-o", str(out)])
    assert code == EXIT_BUDGET
    err = capsys.readouterr().err
    assert err.startswith("hybridplan: error:") and "raise the budget" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["analyze", "/no/such/graph.pb"], "no such file"),
        (["plan", str(FIXTURE), "--budget", "lots"], "not a size"),
        (["plan", str(FIXTURE), "-o", "/no/such/dir/out.pb"], "does not exist"),
        (["plan", str(FIXTURE), "--device", "abacus"], "unknown device"),
        (["trace", "alexnet", "-o", "x.pb"], "unknown model"),
    ],
)
def test_bad_input_exits_3_with_one_line(args, match, capsys):
    assert main(args) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert match in err.lower()


def test_garbage_and_unreadable_files(tmp_path, capsys):
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\xff\x00 this is not a graph")
    assert main(["analyze", str(junk)]) == EXIT_BAD_INPUT
    assert "GraphDef" in capsys.readouterr().err
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.pb"
        locked.write_bytes(FIXTURE.read_bytes())
        locked.chmod(0)
        assert main(["analyze", str(locked)]) == EXIT_BAD_INPUT


def test_text_graphdef(tmp_path, capsys):
    txt = tmp_path / "g.pbtxt"
    txt.write_text(str(graph_pb2.GraphDef.FromString(FIXTURE.read_bytes())))
    assert main(["analyze", str(txt)]) == 0


def test_trace_writes_a_graph(tmp_path):
    out = tmp_path / "cnn.pb"
    assert main(["trace", "small_cnn", "--size", "16", "--batch", "2", "-o", str(out)]) == 0
    a = hybridplan.analyze(out)
    assert a.phases["backward"] > 0 and a.phases["update"] > 0


def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "out.pb"

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(_files.os, "fsync", boom)
    with pytest.raises(OSError):
        _files.atomic_write(target, b"x" * 10_000)
    assert list(tmp_path.iterdir()) == []


def test_console_script_help_and_exit_codes():
    exe = [sys.executable, "-m", "hybridplan.cli"]
    for cmd in ([], ["plan"], ["analyze"], ["compare"], ["trace"], ["demo"]):
        r = subprocess.run([*exe, *cmd, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "usage" in r.stdout
    r = subprocess.run([*exe, "frobnicate"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2


def test_model_list_matches_the_registry():
    from hybridplan import cli, models

    assert set(cli._MODELS) == set(models.WORKLOADS)


def test_plan_with_selection_flags(synth, tmp_path, capsys):
    path, _, half = synth
    js = tmp_path / "plan.json"
    args = ["plan", str(path), "--budget", str(half), "--exclude-type", "Conv2D", "--json", str(js)]
    assert main(args) == 0
    plan = hybridplan.Plan.load(js)
    gd = graph_pb2.GraphDef.FromString(path.read_bytes())
    convs = {i for i, n in enumerate(gd.node) if n.op == "Conv2D"}
    assert plan.swaps or plan.recomputes
    assert not convs & {s["node"] for s in plan.swaps}
    assert not convs & {v for r in plan.recomputes for v in r["nodes"]}
    capsys.readouterr()
    bad = ["plan", str(path), "--budget", str(half), "--include-scope", "no/such/scope"]
    assert main(bad) == EXIT_BAD_INPUT
    assert "matches no node" in capsys.readouterr().err


def test_trace_takes_size_as_sequence_length(tmp_path):
    out = tmp_path / "t.pb"
    code = main(["trace", "transformer", "--size", "16", "--batch", "1", "-o", str(out)])
    assert code == 0
    gd = graph_pb2.GraphDef.FromString(out.read_bytes())
    assert any(n.op == "BatchMatMulV2" or n.op == "Einsum" for n in gd.node)


def test_trial_runs_both_steps_and_draws_the_measured_curve(tmp_path, capsys):
    rep = tmp_path / "rep"
    code = main(["trial", "small_resnet", "--fraction", "0.6", "--report", str(rep)])
    text = capsys.readouterr().out
    assert "equal bit for bit" in text, text
    assert code in (0, 6)  # 6: the measured peak exceeded the budget (printed)
    assert (rep / "memory.png").stat().st_size > 10_000
    assert "measured" in (rep / "report.html").read_text()


@pytest.mark.slow
def test_demo_quick(tmp_path, capsys):
    """The README's main job, at a smaller stage-1 size: exit 0 means the
    rewritten step matched the original bit for bit."""
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "match the original bit for bit" in text
    assert "measured" in text and "predicted" in text
    for f in ("report.html", "memory.png", "streams.png", "plan.json"):
        assert (out / f).stat().st_size > 0
    assert (out / "small_resnet" / "report.html").stat().st_size > 0

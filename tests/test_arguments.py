"""Bad argument values get an InvalidArgumentError naming the argument (python/hybridplan/_args.py),
never an OverflowError, TypeError, KeyError, AttributeError or UnicodeDecodeError from
the bindings, and never an aborted interpreter."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from tensorflow.core.framework import graph_pb2

import hybridplan
import hybridplan.testing
from hybridplan import InvalidArgumentError, Plan

FIXTURE = (pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb").read_bytes()


@pytest.fixture(scope="module")
def peak():
    return hybridplan.analyze(FIXTURE, device="v100-nvlink2").peak_bytes  # plan()'s device


def test_synthetic_graphdef_of_2_56_nodes_is_an_error_not_an_abort():
    """It used to abort the interpreter (an allocation failure does not unwind)."""
    code = (
        "import hybridplan\n"
        "try:\n"
        "    hybridplan.testing.synthetic_graphdef(2**56)\n"
        "except hybridplan.InvalidArgumentError as e:\n"
        "    print('typed:', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "typed: nodes must be an int from 1 to" in r.stdout


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nodes": 100, "batch": -1}, "batch must be an int from 1"),
        ({"nodes": 100, "batch": 0}, "batch must be an int from 1"),
        ({"nodes": True}, "not a bool"),
        ({"nodes": 100, "size": 2**40}, "size must be an int from 1"),
        ({"nodes": 100, "channels": 1.5}, "channels must be an int"),
        ({"nodes": 100, "kind": "lstm"}, "unknown synthetic kind"),
        ({"nodes": 100, "kind": 3}, "kind must be"),
    ],
)
def test_synthetic_graphdef_refuses_instead_of_clamping(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        hybridplan.testing.synthetic_graphdef(**kwargs)


def test_the_core_checks_synthetic_sizes_too():
    """The binding goes through the glue's one run() (catch_unwind, typed errors)."""
    from hybridplan import _core

    with pytest.raises(InvalidArgumentError, match="nodes must be from 1 to"):
        _core.synthetic_graphdef(2**56, "mixed", 8, 32, 64)
    with pytest.raises(InvalidArgumentError, match="batch must be from 1 to"):
        _core.synthetic_graphdef(100, "mixed", -1, 32, 64)


def _plan(peak, **kw):
    return lambda: hybridplan.plan(FIXTURE, peak, **kw)


BAD = [
    (
        "persistent_bytes=-1",
        lambda p: hybridplan.analyze(FIXTURE, persistent_bytes=-1),
        "persistent_bytes",
    ),
    (
        "persistent_bytes=2**64",
        lambda p: hybridplan.analyze(FIXTURE, persistent_bytes=2**64),
        "persistent_bytes",
    ),
    (
        "persistent_bytes='1'",
        lambda p: hybridplan.analyze(FIXTURE, persistent_bytes="1"),
        "persistent_bytes",
    ),
    ("analyze loss=5", lambda p: hybridplan.analyze(FIXTURE, loss=5), "loss must be a tensor name"),
    (
        "analyze separate_buffers=1",
        lambda p: hybridplan.analyze(FIXTURE, separate_buffers=1),
        "separate_buffers",
    ),
    ("live_at_peak(-1)", lambda p: hybridplan.analyze(FIXTURE).live_at_peak(-1), r"k \(how many"),
    ("live_at_peak('3')", lambda p: hybridplan.analyze(FIXTURE).live_at_peak("3"), r"k \(how many"),
    ("profile={-1: 1e-3}", lambda p: _plan(p, profile={-1: 1e-3})(), "profile key"),
    ("profile={2**40: 1e-3}", lambda p: _plan(p, profile={2**40: 1e-3})(), "profile key"),
    ("profile={1: nan}", lambda p: _plan(p, profile={1: float("nan")})(), r"profile\[1\]"),
    ("profile={1: 'x'}", lambda p: _plan(p, profile={1: "x"})(), r"profile\[1\]"),
    ("profile=[1, 2]", lambda p: _plan(p, profile=[1, 2])(), "profile must be a dict"),
    (
        "analyze device with an unknown field",
        lambda p: hybridplan.analyze(FIXTURE, device={"name": "x", "bogus": 1}),
        "unknown field `bogus`",
    ),
    (
        "analyze device missing fields",
        lambda p: hybridplan.analyze(FIXTURE, device={"name": "x"}),
        "every field is required",
    ),
    (
        "fraction_of(nan)",
        lambda p: hybridplan.analyze(FIXTURE).fraction_of(float("nan")),
        "must be finite",
    ),
    ("fraction_of(None)", lambda p: hybridplan.analyze(FIXTURE).fraction_of(None), "budget"),
    ("a path with a NUL byte", lambda p: hybridplan.analyze("step.pb\x00"), "null byte"),
    (
        "profile summing past f64",
        lambda p: _plan(p, profile={0: 1e308, 1: 1e308})(),
        "op times of the profile sum to",
    ),
    (
        "tflms threshold 2**40",
        lambda p: _plan(p, strategy="swap", tflms={"threshold": 2**40})(),
        "tflms",
    ),
    ("tflms=[1]", lambda p: _plan(p, strategy="swap", tflms=[1])(), "tflms must be a dict"),
    (
        "memory_bytes=2**70",
        lambda p: hybridplan.plan(
            FIXTURE, "auto", device=hybridplan.device_model("cpu", memory_bytes=2**70)
        ),
        "memory_bytes",
    ),
    (
        "flops nan",
        lambda p: _plan(p, device=hybridplan.device_model("cpu", flops_f32=float("nan")))(),
        "'flops_f32'",
    ),
    (
        "device name 5",
        lambda p: _plan(p, device=hybridplan.device_model("cpu", name=5))(),
        "'name'",
    ),
    (
        "separate_buffers=1",
        lambda p: _plan(p, separate_buffers=1)(),
        "separate_buffers must be True or False",
    ),
    ("loss=5", lambda p: _plan(p, loss=5)(), "loss must be a tensor name"),
    ("persistent plan -1", lambda p: _plan(p, persistent_bytes=-1)(), "persistent_bytes"),
    ("strategy=5", lambda p: _plan(p, strategy=5)(), "strategy must be a string"),
    ("min_bytes=-1", lambda p: _plan(p, min_bytes=-1)(), "min_bytes"),
    (
        "time_limit nan",
        lambda p: _plan(p, strategy="optimal", time_limit=float("nan"))(),
        "time_limit",
    ),
    ("budget 2**70", lambda p: hybridplan.plan(FIXTURE, 2**70), "2\\^64"),
    ("budget '1e30'", lambda p: hybridplan.plan(FIXTURE, "1e30"), "2\\^64"),
    ("budget []", lambda p: hybridplan.plan(FIXTURE, []), "number of bytes"),
    ("budget '-1'", lambda p: hybridplan.plan(FIXTURE, "-1"), "must be positive"),
    ("budget '-2GiB'", lambda p: hybridplan.plan(FIXTURE, "-2GiB"), "must be positive"),
    (
        "a directory as the graph",
        lambda p: hybridplan.analyze(pathlib.Path(__file__).parent),
        "a directory",
    ),
    ("budget np.bool_", lambda p: hybridplan.plan(FIXTURE, np.bool_(True)), "bool"),
    (
        "rewrite(gd, None)",
        lambda p: hybridplan.rewrite(graph_pb2.GraphDef.FromString(FIXTURE), None),
        "a hybridplan.Plan or its report",
    ),
    (
        "rewrite(gd, {'swaps': [{}]})",
        lambda p: hybridplan.rewrite(graph_pb2.GraphDef.FromString(FIXTURE), {"swaps": [{}]}),
        r"swaps\[0\] must be a dict with node",
    ),
    (
        "rewrite(gd, {'recomputes': 3})",
        lambda p: hybridplan.rewrite(graph_pb2.GraphDef.FromString(FIXTURE), {"recomputes": 3}),
        "must be a list",
    ),
    (
        "rewrite(missing path, ...)",
        lambda p: hybridplan.rewrite("no/such/step.pb", {}),
        "no such file",
    ),
    (
        "rewrite(int, ...)",
        lambda p: hybridplan.rewrite(5, {}),
        "graph_def must be a tf GraphDef, its serialized bytes, a path",
    ),
    (
        "rewrite target 3",
        lambda p: hybridplan.rewrite(graph_pb2.GraphDef.FromString(FIXTURE), {}, target=3),
        "unknown target",
    ),
]


@pytest.mark.parametrize(("what", "call", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_values_are_invalid_argument_errors(what, call, match, peak):
    with pytest.raises(InvalidArgumentError, match=match):
        call(peak)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"swaps": [', "not valid JSON"),
        (b"\xff\xfe\x00\x01binary", "not valid JSON"),
        ("[1, 2]", "a JSON object"),
        ('{"swaps": [], "planned": {}}', "plan-schema version 1 .unversioned.*re-plan"),
        ('{"schema_version": 99, "swaps": []}', "plan-schema version 99.*re-plan"),
        (
            '{"schema_version": 2, "swaps": [], "planned": {}}',
            "missing or malformed: missing field",
        ),
        ("[" * 100_000, "not valid JSON"),
    ],
)
def test_plan_load_of_partial_or_binary_files(tmp_path, content, match):
    path = tmp_path / "plan.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(InvalidArgumentError, match=match):
        Plan.load(path)


def test_a_saved_plan_loads_and_prints(tmp_path, peak):
    p = hybridplan.plan(FIXTURE, peak)
    p.save(tmp_path / "p.json")
    q = Plan.load(tmp_path / "p.json")
    assert q.report == json.loads(p.to_json())
    assert repr(q) == repr(p)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("18446744073709551615", 2**64 - 1),  # read exactly, not through a float
        ("1E3", 1000),
        ("1e3", 1000),
        ("1.5e3 KiB", 1536000),
        (" 16GiB ", 16 * 2**30),
        ("9007199254740993", 9007199254740993),  # 2^53 + 1: a float would round it
        (np.int64(1000), 1000),
        (np.uint64(2**64 - 1), 2**64 - 1),
        (np.float64(1000.0), 1000),
        (1000.7, 1000),
    ],
)
def test_budget_values(value, expected):
    assert hybridplan.parse_bytes(value) == expected


def test_an_int_budget_and_its_string_plan_alike(peak):
    assert hybridplan.plan(FIXTURE, str(peak)).budget == hybridplan.plan(FIXTURE, peak).budget


def test_plan_prints_in_words(peak):
    """print(plan) says what happened in words, with units next to raw bytes."""
    fits = repr(hybridplan.plan(FIXTURE, peak))
    assert "'hybrid': the step already fits" in fits
    assert "strategy='none'" not in fits and "KiB)" in fits
    gd = hybridplan.testing.synthetic_graphdef(300, "residual", batch=4, size=16)
    # The peak of the device plan() plans for (its default), not of this CPU: with
    # TensorFlow's own kernels (oneDNN off) this CPU's convolutions hold scratch.
    a = hybridplan.analyze(gd, device="v100-nvlink2")
    p = hybridplan.plan(gd, a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 3 // 4)
    text = repr(p)
    assert text.startswith("Plan('hybrid'") and "within the budget" in text
    assert re.search(r"\b\d+ tensors? swapped, \d+ ops? recomputed", text) and "ms" in text
    assert len(text) < 400


def test_budget_error_messages_name_the_strategy_and_units(peak):
    a = hybridplan.analyze(FIXTURE)
    with pytest.raises(hybridplan.BudgetError) as e:
        hybridplan.plan(FIXTURE, a.persistent_bytes - 1)
    msg = str(e.value)
    # The note about the variables is outside the quoted strategy name.
    assert "by strategy 'hybrid';" in msg and "'hybrid;" not in msg
    assert "the variables and optimizer slots alone take 63804 bytes (62.3 KiB)" in msg
    assert e.value.strategy == "hybrid"
    gd = hybridplan.testing.synthetic_graphdef(300, "residual", batch=4, size=16)
    g = hybridplan.analyze(gd, device="v100-nvlink2")
    tight = g.persistent_bytes + (g.peak_bytes - g.persistent_bytes) // 20
    with pytest.raises(hybridplan.BudgetError) as e:
        hybridplan.plan(gd, tight, strategy="tflms", tflms={"threshold": 0})
    assert e.value.strategy == "tflms" and "strategy 'tflms'" in str(e.value)
    assert "MiB" in str(e.value) or "KiB" in str(e.value)


def test_tflms_with_parameters_reports_strategy_tflms():
    gd = hybridplan.testing.synthetic_graphdef(300, "residual", batch=4, size=16)
    a = hybridplan.analyze(gd, device="v100-nvlink2")  # plan()'s device, on any CPU
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 9 // 10
    p = hybridplan.plan(gd, budget, strategy="tflms", tflms={"threshold": 0, "ahead": 1})
    assert p.strategy == "tflms"
    q = hybridplan.plan(gd, budget, strategy="swap", tflms={"threshold": 0, "ahead": 1})
    assert q.strategy == "swap"


def test_graph_files_are_read_with_a_bound(tmp_path, monkeypatch):
    """/dev/zero (or any endless file) ends in an error, not a MemoryError."""
    from hybridplan import _graphio

    monkeypatch.setattr(_graphio, "MAX_GRAPH_BYTES", 1 << 20)
    with pytest.raises(hybridplan.InvalidGraphError, match="more than 1048576 bytes"):
        hybridplan.analyze("/dev/zero")
    big = tmp_path / "big.pb"
    big.write_bytes(b"\0" * ((1 << 20) + 1))
    with pytest.raises(hybridplan.InvalidGraphError, match="protobuf's limit"):
        hybridplan.analyze(big)

"""The package's public surface: what ``dir(hybridplan)`` lists, what the names are, and
``hybridplan.testing`` (graphs for tests and experiments) kept out of it."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import hybridplan


def test_dir_lists_the_public_names_and_only_them():
    names = dir(hybridplan)
    assert names == sorted(hybridplan.__all__)  # dir() sorts what __dir__ returns
    # The lazily loaded names are listed before they are loaded ...
    assert {"apply", "trace", "measure", "fit", "trial", "Traced"} <= set(names)
    # ... and the module's own imports are not.
    assert not {"Any", "annotations", "importlib"} & set(names)


def test_trial_is_the_function():
    pytest.importorskip("tensorflow")
    from hybridplan import trialing

    assert inspect.isfunction(hybridplan.trial)
    assert hybridplan.trial is trialing.trial and hybridplan.Trial is trialing.Trial


def test_testing_is_reachable_but_not_public():
    assert "testing" not in hybridplan.__all__
    assert "synthetic_graphdef" not in hybridplan.__all__
    assert not hasattr(hybridplan, "synthetic_graphdef")
    data = hybridplan.testing.synthetic_graphdef(2000, "dag")
    assert hybridplan.analyze(data).num_nodes > 1500


def test_each_name_means_one_thing():
    """A top-level name is not defined again with another signature elsewhere: the
    distributed step's trace, apply, measure and planned step (other arguments, other
    results) have names of their own."""
    from hybridplan import distributed

    assert not set(distributed.__all__) & set(hybridplan.__all__)
    for name in ("trace", "trace_keras", "apply", "measure", "PlannedStep"):
        assert not hasattr(distributed, name)
    for name in ("trace", "trace_keras", "apply", "measure"):
        assert callable(getattr(distributed, f"{name}_distributed"))
    assert inspect.isclass(distributed.DistributedStep)


def test_a_plans_figures_are_the_reports(synth_small):
    """``Plan.original``/``planned`` are the plan schema's ``Figures`` as the report
    holds them, not a copy in a class of their own."""
    data, budget = synth_small
    p = hybridplan.plan(data, budget, strategy="swap", device="a100-pcie4")
    assert p.planned is p.report["planned"] and p.original is p.report["original"]
    assert p.planned["peak_bytes"] <= budget < p.original["peak_bytes"]


def test_a_graph_of_another_type_is_an_invalid_argument():
    """The glue maps its own argument errors as it maps the core's: one place."""
    with pytest.raises(hybridplan.InvalidArgumentError, match="GraphDef bytes or an analysis"):
        hybridplan._core.plan("not a graph", 1 << 30)
    with pytest.raises(hybridplan.InvalidArgumentError, match="unknown device preset"):
        hybridplan._core.plan(hybridplan.testing.synthetic_graphdef(500), 1, device="abacus")


@pytest.fixture(scope="module")
def synth_small():
    data = hybridplan.testing.synthetic_graphdef(2000, "mixed")
    a = hybridplan.analyze(data)
    return data, a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 4 // 5


def test_importing_hybridplan_loads_neither_testing_nor_tensorflow():
    code = (
        "import sys, hybridplan; "
        "print('hybridplan.testing' in sys.modules, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_submodules_the_docs_name_are_attributes():
    """``hybridplan.runner.setup_cpu_emulation`` (docs/remat.md, docs/distributed.md)
    and ``hybridplan.models.build`` work after ``import hybridplan`` alone."""
    code = (
        "import hybridplan; "
        "print(callable(hybridplan.runner.setup_cpu_emulation), "
        "callable(hybridplan.models.build))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


def test_analysing_a_pb_file_with_cpu_kernels_loads_no_tensorflow(tmp_path):
    """The CPU workspace rule (the default of ``analyze``, and the ``cpu`` device's) reads
    TensorFlow's oneDNN rule without importing it (``_backend.onednn_rule``)."""
    path = tmp_path / "step.pb"
    path.write_bytes(hybridplan.testing.synthetic_graphdef(2000, "mixed"))
    code = (
        "import sys, hybridplan; "
        f"hybridplan.analyze({str(path)!r}); "
        f"hybridplan.analyze({str(path)!r}, device='cpu'); "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"], out.stderr[-2000:]


@pytest.mark.parametrize("env", [None, "0", "1", "TRUE", "False", "2", ""])
def test_the_onednn_rule_is_tensorflows(env):
    """Read before TensorFlow is imported, the rule gives TensorFlow's own answer in the
    same process (``IsMklEnabled``), however ``TF_ENABLE_ONEDNN_OPTS`` is set (a value
    TensorFlow does not read as a bool leaves its default)."""
    pytest.importorskip("tensorflow")
    code = (
        "import sys; from hybridplan import _backend; rule = _backend.onednn_rule(); "
        "assert 'tensorflow' not in sys.modules; "
        "from tensorflow.python.util import _pywrap_util_port; "
        "print(rule, bool(_pywrap_util_port.IsMklEnabled()), _backend.onednn_enabled())"
    )
    environ = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if env is not None:
        environ["TF_ENABLE_ONEDNN_OPTS"] = env
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environ
    )
    rule, tf, enabled = out.stdout.split()
    assert rule == tf == enabled, (env, out.stdout)


def test_the_encoder_writes_what_tensorflow_reads():
    """One writer for every hand-made graph: TensorFlow's own parser reads its bytes
    back as the fields given (an unknown rank, a negative size, the dtype key)."""
    graph_pb2 = pytest.importorskip("tensorflow.core.framework.graph_pb2")
    from hybridplan.testing import RESOURCE, encode

    data = encode.graph_def(
        [
            encode.node_def("v", "VarHandleOp", shapes=[[]], dtype=RESOURCE, dtype_key="dtype"),
            encode.node_def("x", "Relu", ["v", "^v"], [[2, -1], None]),
        ]
    )
    gd = graph_pb2.GraphDef.FromString(data)
    v, x = gd.node
    assert (v.name, v.op, v.attr["dtype"].type) == ("v", "VarHandleOp", RESOURCE)
    assert list(x.input) == ["v", "^v"] and x.attr["T"].type == encode.FLOAT
    known, unknown = x.attr["_output_shapes"].list.shape
    assert [d.size for d in known.dim] == [2, -1] and unknown.unknown_rank
    # node() appends the same bytes to a message.
    gd2 = graph_pb2.GraphDef()
    encode.node(gd2, "x", "Relu", ["v", "^v"], [[2, -1], None])
    assert gd2.node[0] == x


@pytest.mark.parametrize("name", ["chain", "residual", "unet", "dag"])
def test_the_small_families_analyse_with_their_loss(name):
    from hybridplan.testing import families

    label, data, loss = families.family(name, 0, seed=1)
    a = hybridplan.analyze(data, loss=loss)
    assert a.loss == loss and a.num_nodes >= 15, label

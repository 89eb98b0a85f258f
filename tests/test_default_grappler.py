"""Bit for bit under TensorFlow's default settings (default Grappler, arithmetic optimizer
and common-subgraph elimination on): a rewritten step computes what the original does.

Grappler sorts the data inputs of every commutative op by name before it optimises
(``utils/canonicalizer.cc``, run by common-subgraph elimination), and an ``AddN`` sums
its inputs in that order. A swap-in, clone or gate that takes an input's place must
therefore sort where the input did (rewriting.py, "Names"). Nothing here changes a
TensorFlow setting.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2

from hybridplan import STRATEGIES, models
from hybridplan.rewriting import rewrite_with_summary
from hybridplan.trialing import same_bits, side_by_side

# a, b, c = -x, -y, -z; s = AddN(b, c, a); Grappler sums it as sorted: (a + b) + c.
# With x = 1e8, y = -1e8, z = 1 that is (-1e8 + 1e8) + -1 = -1, while (b + c) + a (the
# order when ``a`` is read as ``hybridplan/...``, sorted after ``b`` and ``c``) rounds
# 1e8 - 1 to 1e8 and gives 0.
_FEED = {"x": 1e8, "y": -1e8, "z": 1.0}


def _sum_of_three() -> graph_pb2.GraphDef:
    gd = graph_pb2.GraphDef()
    for name in "xyz":
        ph = gd.node.add(name=name, op="Placeholder")
        ph.attr["dtype"].type = types_pb2.DT_FLOAT
        ph.attr["shape"].shape.dim.add().size = 1
    for name, src in zip("abc", "xyz", strict=True):
        gd.node.add(name=name, op="Neg", input=[src]).attr["T"].type = types_pb2.DT_FLOAT
    s = gd.node.add(name="s", op="AddN", input=["b", "c", "a"])
    s.attr["T"].type = types_pb2.DT_FLOAT
    s.attr["N"].i = 3
    return gd


def _run(gd: graph_pb2.GraphDef) -> np.ndarray:
    from hybridplan.measuring import session_config

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=graph, config=session_config(2)) as sess:
        feed = {f"{k}:0": np.array([v], np.float32) for k, v in _FEED.items()}
        return sess.run("s:0", feed_dict=feed)


def _index(gd: graph_pb2.GraphDef, name: str) -> int:
    return next(i for i, n in enumerate(gd.node) if n.name == name)


_PLANS = {
    "swap": lambda gd: {
        "swaps": [
            {
                "node": _index(gd, "a"),
                "after": _index(gd, "a"),
                "ins": [{"trigger": _index(gd, "c"), "consumers": [_index(gd, "s")]}],
            }
        ],
        "recomputes": [],
    },
    "recompute": lambda gd: {
        "swaps": [],
        "recomputes": [
            {"nodes": [_index(gd, "a")], "trigger": _index(gd, "c"), "consumers": [_index(gd, "s")]}
        ],
    },
}


@pytest.mark.parametrize("kind", sorted(_PLANS))
def test_an_input_taken_over_keeps_its_place_in_a_sum(kind):
    """The minimal graph: one input of a three-input ``AddN`` swapped (or recomputed).
    Named ``hybridplan/...`` (before), the new input sorted last and the sum changed from
    -1 to 0 under the default Grappler."""
    gd = _sum_of_three()
    out = rewrite_with_summary(gd, _PLANS[kind](gd), target="cpu-emulation")
    s = out.graph_def.node[_index(out.graph_def, "s")]
    taker = next(t for t in s.input if t not in ("b", "c"))
    assert taker != "a" and sorted(s.input).index(taker) == sorted(["a", "b", "c"]).index("a")
    want = _run(gd)
    assert want[0] == -1.0  # the original sums (a + b) + c
    assert _run(out.graph_def).tobytes() == want.tobytes()


def test_names_rank_against_siblings_sharing_the_producer_name():
    """A sibling input whose name starts with the producer's (``a_1``, ``a/Mul``,
    ``a:1``) decides the pad: the new name sorts against it as the tensor did."""
    from hybridplan.rewriting import _ranked

    siblings = ["a/Mul", "a_1", "a:1", "a-b", "b", "Z"]
    for target, stands in (("", "a"), (":2", "a:2"), (":1", "a:1")):
        others = [x for x in siblings if x != stands]
        name = _ranked("a", [target], others, "hybridplan/swap_in/0_0")
        rank = sorted([*others, name]).index(name)
        assert rank == sorted([*others, stands]).index(stands), (target, name)


# m1 = Mul(s, F), m2 = Mul(m1, v) with s a scalar, F 4x4 and v of 4: Grappler's
# MinimizeBroadcasts (arithmetic optimizer) multiplies the smaller operands first,
# (s * v) * F, unless m1 drives a control edge; then it keeps (s * F) * v, which rounds
# otherwise. A swap-in of ``a`` for ``r`` triggered by m1 puts such an edge there.
_RNG = np.random.default_rng(3)
_MUL_FEED = {
    "s": np.float32(0.1),
    "F": _RNG.standard_normal((4, 4)).astype(np.float32),
    "v": _RNG.standard_normal(4).astype(np.float32),
    "x": _RNG.standard_normal(4).astype(np.float32),
}


def _add_chain(gd: graph_pb2.GraphDef) -> None:
    """The chain's float ops: ``m2 = (s * F) * v`` with three unrelated ``Neg``."""
    for name, op, inputs in (
        ("a", "Neg", ["x"]),
        ("b", "Neg", ["x"]),
        ("m1", "Mul", ["s", "F"]),
        ("m2", "Mul", ["m1", "v"]),
        ("r", "Neg", ["a"]),
    ):
        gd.node.add(name=name, op=op, input=inputs).attr["T"].type = types_pb2.DT_FLOAT


def _placeholders(feed: dict) -> graph_pb2.GraphDef:
    """A GraphDef of one float ``Placeholder`` per entry of ``feed``, of its shape."""
    gd = graph_pb2.GraphDef()
    for name, value in feed.items():
        ph = gd.node.add(name=name, op="Placeholder")
        ph.attr["dtype"].type = types_pb2.DT_FLOAT
        for d in np.shape(value):
            ph.attr["shape"].shape.dim.add().size = d
    return gd


def _mul_chain() -> graph_pb2.GraphDef:
    gd = _placeholders(_MUL_FEED)
    _add_chain(gd)
    return gd


def _run_fed(gd: graph_pb2.GraphDef, feed: dict, fetch: str) -> np.ndarray:
    """``fetch`` (and ``r``) of ``gd`` run as a function of the placeholders, fed
    ``feed``, as a traced step runs (runner.py): Grappler then knows their shapes, and
    prunes what neither output needs. (A Session's fed placeholders have none for the
    arithmetic optimizer, which does not assume feeds valid, so its shape stages do
    nothing there.)"""
    names = list(feed)

    def body(*args):
        return tf.graph_util.import_graph_def(
            gd,
            input_map={f"{k}:0": x for k, x in zip(names, args, strict=True)},
            return_elements=[f"{fetch}:0", "r:0"],
            name="",
        )

    specs = [tf.TensorSpec(np.shape(v), tf.float32) for v in feed.values()]
    out, _ = tf.compat.v1.wrap_function(body, specs)(*feed.values())
    return out.numpy()


def _run_chain(gd: graph_pb2.GraphDef) -> np.ndarray:
    """``m2`` of the chain ``gd`` (``_run_fed``)."""
    return _run_fed(gd, _MUL_FEED, "m2")


def _swapped_a(gd: graph_pb2.GraphDef, trigger: str) -> graph_pb2.GraphDef:
    """``gd`` rewritten with ``a`` swapped out and back in for ``r``, the swap-in
    triggered by ``trigger``: a plan that leaves every float product alone but for the
    trigger's control edge."""
    plan = {
        "swaps": [
            {
                "node": _index(gd, "a"),
                "after": _index(gd, "a"),
                "ins": [{"trigger": _index(gd, trigger), "consumers": [_index(gd, "r")]}],
            }
        ],
        "recomputes": [],
    }
    return rewrite_with_summary(gd, plan, target="cpu-emulation").graph_def


def test_a_trigger_inside_a_mul_chain_changes_the_product():
    """The minimal graph for MinimizeBroadcasts: the original runs (s * v) * F; with the
    swap-in's trigger on m1 (the chain's inner link) the rewritten graph runs (s * F) * v
    and differs in the last bits; with the trigger the planner picks (``safe_trigger``
    passes over a link of such a chain, rust/core/src/plan/trigger.rs) it is
    bit-identical."""
    f = _MUL_FEED
    reordered, as_written = (f["s"] * f["v"]) * f["F"], (f["s"] * f["F"]) * f["v"]
    assert reordered.tobytes() != as_written.tobytes()  # the values tell the orders apart
    gd = _mul_chain()
    want = _run_chain(gd)
    assert want.tobytes() == reordered.tobytes()  # Grappler reordered the original

    def swapped(trigger: str) -> np.ndarray:
        return _run_chain(_swapped_a(gd, trigger))

    assert swapped("m1").tobytes() == as_written.tobytes()  # the edge stopped the stage
    assert swapped("b").tobytes() == want.tobytes()


def _mul_chain_of_variables(values: dict) -> graph_pb2.GraphDef:
    """The chain with ``s`` and ``F`` read from resource variables (handles ``hs``,
    ``hF``), as a step reads its weights: the rewriter gates no variable read."""
    gd = graph_pb2.GraphDef()
    for name in ("hs", "hF"):
        gd.node.add(name=name, op="Placeholder").attr["dtype"].type = types_pb2.DT_RESOURCE
    for name in ("v", "x"):
        ph = gd.node.add(name=name, op="Placeholder")
        ph.attr["dtype"].type = types_pb2.DT_FLOAT
        for d in np.shape(values[name]):
            ph.attr["shape"].shape.dim.add().size = d
    for name, handle in (("s", "hs"), ("F", "hF")):
        read = gd.node.add(name=name, op="ReadVariableOp", input=[handle])
        read.attr["dtype"].type = types_pb2.DT_FLOAT
    _add_chain(gd)
    return gd


def _run_chain_of_variables(gd: graph_pb2.GraphDef, variables: dict) -> np.ndarray:
    def body(v, x):
        return tf.graph_util.import_graph_def(
            gd,
            input_map={
                "hs:0": tf.identity(variables["s"].handle),
                "hF:0": tf.identity(variables["F"].handle),
                "v:0": v,
                "x:0": x,
            },
            return_elements=["m2:0", "r:0"],
            name="",
        )

    specs = [tf.TensorSpec([4], tf.float32)] * 2
    m2, _ = tf.compat.v1.wrap_function(body, specs)(_MUL_FEED["v"], _MUL_FEED["x"])
    return m2.numpy()


def test_a_swapped_or_cloned_link_of_a_mul_chain_changes_the_product():
    """The two placements the planner now avoids (rust/core/src/plan/candidates.rs,
    ``triggered_link`` in options.rs), on the chain m2 = (s * F) * v that Grappler runs as
    (s * v) * F: (a) m1 swapped for its one reader m2 (the swap-out becomes m1's only
    reader, m2 reads an ``Identity``: the chain ends there); (b) m1 recomputed for m2 when
    s and F are variable reads (the clone reads no gate and takes the trigger's control
    edge itself: the stage leaves it out). Both run the product as written, other bits."""
    f = _MUL_FEED
    reordered, as_written = (f["s"] * f["v"]) * f["F"], (f["s"] * f["F"]) * f["v"]
    gd = _mul_chain()
    assert _run_chain(gd).tobytes() == reordered.tobytes()
    swap = {
        "swaps": [
            {
                "node": _index(gd, "m1"),
                "after": _index(gd, "m1"),
                "ins": [{"trigger": _index(gd, "b"), "consumers": [_index(gd, "m2")]}],
            }
        ],
        "recomputes": [],
    }
    swapped = rewrite_with_summary(gd, swap, target="cpu-emulation").graph_def
    assert _run_chain(swapped).tobytes() == as_written.tobytes()

    variables = {k: tf.Variable(f[k]) for k in ("s", "F")}
    gd = _mul_chain_of_variables(f)
    assert _run_chain_of_variables(gd, variables).tobytes() == reordered.tobytes()
    rec = {
        "swaps": [],
        "recomputes": [
            {
                "nodes": [_index(gd, "m1")],
                "trigger": _index(gd, "b"),
                "consumers": [_index(gd, "m2")],
            }
        ],
    }
    cloned = rewrite_with_summary(gd, rec, target="cpu-emulation").graph_def
    clone = next(n for n in cloned.node if n.op == "Mul" and "recompute" in n.name)
    assert "^b" in clone.input  # the trigger's edge on the clone itself
    assert _run_chain_of_variables(cloned, variables).tobytes() == as_written.tobytes()


_DIV_FEED = {
    "F": _RNG.standard_normal((4, 4)).astype(np.float32),
    "v": _RNG.standard_normal((4, 4)).astype(np.float32),
    "x": _RNG.standard_normal(4).astype(np.float32),
}


def _division_by_six() -> graph_pb2.GraphDef:
    """``d = (F * v) / 6`` where ``m1 = F * v`` has a second, unread reader ``dead``
    (as a hard-swish gradient's ``Mul`` has: the gradient with respect to the constant
    6), and ``r = -(-x)`` unrelated."""
    gd = _placeholders(_DIV_FEED)
    six = gd.node.add(name="six", op="Const")
    six.attr["dtype"].type = types_pb2.DT_FLOAT
    six.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(6.0)))
    for name, op, inputs in (
        ("a", "Neg", ["x"]),
        ("b", "Neg", ["x"]),
        ("m1", "Mul", ["F", "v"]),
        ("dead", "Neg", ["m1"]),
        ("d", "RealDiv", ["m1", "six"]),
        ("r", "Neg", ["a"]),
    ):
        gd.node.add(name=name, op=op, input=inputs).attr["T"].type = types_pb2.DT_FLOAT
    return gd


def _run_division(gd: graph_pb2.GraphDef) -> np.ndarray:
    """``d`` run as a function of the placeholders (``dead`` is pruned, as in a step)."""
    return _run_fed(gd, _DIV_FEED, "d")


def test_a_trigger_on_a_mul_divided_by_a_constant_changes_the_product():
    """Grappler folds ``d = m1 / 6`` into ``m1 * (1/6)`` and regroups it with ``m1`` once
    the unread ``dead`` is pruned, so the original does not compute ``(F * v) / 6`` as
    written; with a swap-in's trigger on ``m1`` the product is grouped otherwise and
    differs in the last bits. The planner passes over such an ``m1`` (``kept_reader`` and
    ``seen_op`` in rust/core/src/plan/trigger.rs; a Keras MobileNetV3Small's hard-swish
    gradient, docs/accuracy.md)."""
    f = _DIV_FEED
    gd = _division_by_six()
    want = _run_division(gd)
    as_written = (f["F"] * f["v"]) / np.float32(6)
    assert want.tobytes() != as_written.tobytes()  # Grappler regrouped the original

    def swapped(trigger: str) -> np.ndarray:
        return _run_division(_swapped_a(gd, trigger))

    assert swapped("m1").tobytes() != want.tobytes()
    assert swapped("b").tobytes() == want.tobytes()


# --------------------------------------------------------------------------- real models


def _mobilenet(optimizer: str) -> models.Workload:
    import keras

    keras.utils.set_random_seed(0)
    net = keras.applications.MobileNetV2(
        alpha=0.35, weights=None, input_shape=(64, 64, 3), classes=10
    )
    opt = (
        keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
        if optimizer == "sgd"
        else keras.optimizers.Adam(learning_rate=1e-3)
    )
    x, y = tf.TensorSpec([4, 64, 64, 3]), tf.TensorSpec([4], tf.int32)
    return models.from_keras(net, x, y, 10, optimizer=opt)


_MOBILENETS: dict[str, tuple] = {}


def _traced_mobilenet(optimizer: str) -> tuple:
    """``_mobilenet(optimizer)`` and its trace, made once per optimizer and shared by the
    tests below: ``measure`` runs on copies of the variables, and ``apply`` leaves the
    trace as it was."""
    if optimizer not in _MOBILENETS:
        w = _mobilenet(optimizer)
        _MOBILENETS[optimizer] = (w, w.trace())
    return _MOBILENETS[optimizer]


def _efficientnet(optimizer: str) -> models.Workload:
    import keras

    keras.utils.set_random_seed(0)
    net = keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3), classes=10)
    opt = (
        keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
        if optimizer == "sgd"
        else keras.optimizers.Adam(learning_rate=1e-3)
    )
    x, y = tf.TensorSpec([2, 64, 64, 3]), tf.TensorSpec([2], tf.int32)
    return models.from_keras(net, x, y, 10, optimizer=opt)


def _every_strategy_bit_identical(
    w: models.Workload,
    device: str,
    traced: object = None,
    strategies: tuple[str, ...] = STRATEGIES,
    fractions: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9),
) -> None:
    """Plans ``w`` for ``device`` with each strategy at the lowest budget
    ``Analysis.budget_for(f)``, f = 0.5, 0.6, ... 0.9, that the strategy reaches and runs
    the original and each rewrite three steps (TF defaults): same losses and weights.
    ``traced``: ``w``'s trace, traced here when None.

    Strategies whose rewritten GraphDefs are byte for byte the same (``tflms`` and
    ``hybrid-paper``, ``swap`` and ``hybrid`` often are) compute the same thing: each
    distinct GraphDef runs once and its result is asserted for every strategy that made
    it, each named in the assertion's message."""
    from hybridplan.analysis import analyze
    from hybridplan.applying import apply
    from hybridplan.errors import BudgetError
    from hybridplan.measuring import measure

    if traced is None:
        traced = w.trace()
    a = analyze(traced, device=device)
    base = measure(traced, None, w.batch, steps=3, warmup=0)
    # serialized rewritten GraphDef -> (the GraphDef, [(strategy, fraction, inserted)])
    rewrites: dict[bytes, tuple] = {}
    for strategy in strategies:
        for fraction in fractions:
            budget = a.budget_for(fraction)
            try:
                r = apply(
                    traced,
                    budget,
                    strategy=strategy,
                    device=device,
                    target="cpu-emulation",
                    min_bytes=1 << 12,
                )
                break
            except BudgetError:
                continue
        else:
            raise AssertionError(f"{strategy}: no plan at {fractions[-1]} of the activation peak")
        inserted = r.report["inserted"]
        assert inserted["swap_out"] + inserted["clones"] > 0, (strategy, inserted)
        key = r.graph_def.SerializeToString(deterministic=True)
        rewrites.setdefault(key, (r.graph_def, []))[1].append((strategy, fraction, inserted))
    assert sorted(s for _, made in rewrites.values() for s, _, _ in made) == sorted(strategies)
    for graph_def, made in rewrites.values():
        new = measure(traced, graph_def, w.batch, steps=3, warmup=0, host_on_device=True)
        assert same_bits(base, new), (made, base.losses, new.losses)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mobilenet_v2_every_strategy_bit_identical(optimizer):
    """The reported case: MobileNetV2 (alpha 0.35, 64x64, batch 4), every strategy; at
    half its activations the hybrid plan swaps 32 tensors (no clones) and, before
    swap-ins were named after their producer, the second step's loss differed (AddN of
    batch-norm gradients summed in another order)."""
    w, traced = _traced_mobilenet(optimizer)
    _every_strategy_bit_identical(w, "v100-nvlink2", traced)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_efficientnet_b0_every_strategy_bit_identical(optimizer):
    """A second keras.applications model, of another family (swish, squeeze-excite,
    depthwise convolutions): every strategy bit-identical over three steps. TFLMS's swap
    rules reach only budgets near the original's peak here, hence the fractions. ``chen``
    plans at 0.9: before its cuts let only activations cross (rust/core/src/plan/cuts.rs,
    ``Made::Activations``), the classifier's dropout mask, drawn at the start of the
    forward pass, crossed every boundary, left 3 segments and no plan below the peak."""
    fractions = (0.5, 0.7, 0.9, 0.95, 0.99)
    _every_strategy_bit_identical(_efficientnet(optimizer), "v100-nvlink2", fractions=fractions)


@pytest.mark.slow
def test_mobilenet_v3_small_swap_plan_bit_identical():
    """MobileNetV3Small (hard-swish: ``x * relu6(x + 3) / 6``) with SGD, the swap plan at
    0.99 of its activations: with oneDNN on, 93 swap-ins, one of which was triggered by a
    hard-swish gradient's ``Mul`` whose live reader is the division by 6 (a ``Mul`` to
    Grappler) and whose other reader is dead; weights changed (docs/accuracy.md). With
    oneDNN off the plan is one swap; both must run bit for bit as the original."""
    import keras

    from hybridplan.analysis import analyze
    from hybridplan.applying import apply

    keras.utils.set_random_seed(0)
    net = keras.applications.MobileNetV3Small(
        weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation=None
    )
    x, y = tf.TensorSpec([2, 32, 32, 3]), tf.TensorSpec([2], tf.int32)
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    w = models.from_keras(net, x, y, 10, optimizer=opt)
    traced = w.trace()
    a = analyze(traced, device="cpu")
    r = apply(
        traced,
        a.budget_for(0.99),
        strategy="hybrid",
        device="cpu",
        target="cpu-emulation",
        min_bytes=256,
    )
    assert r.report["inserted"]["swap_in"] > 0
    base, new = side_by_side(traced, r.graph_def, w.batch)
    assert same_bits(base, new), (base.losses, new.losses)


@pytest.mark.slow
def test_mobilenet_v2_arithmetic_regroups_as_the_original():
    """The reported case's hybrid plan at half the activations (32 swaps): the executed
    graphs hold the same kernels and the same nodes regrouped by the arithmetic
    optimizer's MinimizeBroadcasts and AddOpsRewrite (verify counts them by stage). With
    the swap-ins triggered by the first ``Mul`` of a batch-norm gradient's chain, the
    stage regrouped 192 nodes of the rewritten step against 208 of the original's."""
    from hybridplan.analysis import analyze
    from hybridplan.applying import apply
    from hybridplan.runner import compile_step
    from hybridplan.verification import run_recorded, verify

    w, traced = _traced_mobilenet("sgd")
    a = analyze(traced, device="v100-nvlink2")
    r = apply(
        traced,
        a.budget_for(0.5),
        strategy="hybrid",
        device="v100-nvlink2",
        target="cpu-emulation",
        min_bytes=1 << 12,
    )
    assert r.summary.swap_out
    _, original = run_recorded(compile_step(traced, traced.graph_def), *w.batch(0))
    report = verify(compile_step(traced, r.graph_def), r.summary, *w.batch(0), original=original)
    regrouped = {k: v for k, v in report.kernels.items() if "{" in k}
    assert sum(n for n, _ in regrouped.values()) > 0, report.kernels
    assert report.ok and not report.kernel_changes, report.describe()


@pytest.mark.slow
def test_transformer_seq512_bit_identical():
    """The transformer from the notes (seq 512, d_model 128, 8 heads, 4 layers, batch 2),
    hybrid for ``h100-pcie5`` at half its activations: swaps and recomputed attention."""
    w = models.build("transformer", seq=512, d_model=128, heads=8, layers=4, batch=2)
    traced = w.trace()
    from hybridplan.analysis import analyze
    from hybridplan.applying import apply

    a = analyze(traced, device="h100-pcie5")
    r = apply(
        traced,
        a.budget_for(0.5),
        strategy="hybrid",
        device="h100-pcie5",
        target="cpu-emulation",
        min_bytes=1 << 12,
    )
    assert r.report["inserted"]["swap_out"] > 0 and r.report["inserted"]["clones"] > 0
    assert same_bits(*side_by_side(traced, r.graph_def, w.batch, 3))


# --------------------------------------------------------------------------- verify


def test_verify_compares_the_kernels_with_the_original_run():
    """verify(original=...) counts the kernels both executed graphs ran, fused ones by
    the ops they fused: a swap plan leaves them as they were; an extra reader of a
    matrix product's output (what a careless rewrite adds) stops its fusion with the bias
    addition, and shows."""
    from hybridplan.analysis import analyze
    from hybridplan.applying import apply
    from hybridplan.rewriting import DO_NOT_REMOVE
    from hybridplan.runner import compile_step
    from hybridplan.verification import run_recorded, verify

    w = models.build("small_cnn", size=64, batch=8, convs=4)
    traced = w.trace()
    _, original = run_recorded(compile_step(traced, traced.graph_def), *w.batch(0))
    a = analyze(traced)
    budget = a.budget_for(0.8)
    r = apply(traced, budget, strategy="swap", device="cpu", target="cpu-emulation")
    assert r.summary.swap_out
    report = verify(compile_step(traced, r.graph_def), r.summary, *w.batch(0), original=original)
    assert report.ok and not report.kernel_changes, report.describe()
    assert sum(n for n, _ in report.fused.values()) > 0, report.kernels  # MatMul+BiasAdd

    gd = graph_pb2.GraphDef()
    gd.CopyFrom(traced.graph_def)
    bias = next(n for n in gd.node if n.op == "BiasAdd")  # of the dense layer: fused
    reader = gd.node.add(name="extra_reader", op="Identity", input=[bias.input[0]])
    reader.attr["T"].type = types_pb2.DT_FLOAT
    reader.attr[DO_NOT_REMOVE].b = True
    out = next(n for n in gd.node if n.name == traced.outputs[0].split(":")[0])
    out.input.append("^extra_reader")
    broken = verify(
        compile_step(traced, gd),
        ["extra_reader"],
        *w.batch(0),
        original=original,
        on_missing="ignore",
    )
    assert broken.kernel_changes and not broken.ok, broken.kernels

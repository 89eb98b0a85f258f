"""The structure-aware fuzzer (tests/fuzz_structured.py) at a modest count: valid
training steps mutated at the node level, planned with every strategy and option,
applied and re-analysed. Every execution must end in a typed error before the plan,
or in a plan within its budget that applies and whose rewritten graph analyses.

The long run (10^5 executions, docs/reliability.md) is
``python tests/fuzz_structured.py --execs 100000 --out fuzz-out/``.
"""

from __future__ import annotations

import fuzz_structured


def test_mutated_training_steps_plan_apply_and_reanalyse():
    stats = fuzz_structured.run(1500, seed=0)
    assert stats.execs == 1500
    assert stats.findings == [], stats.findings[:3]
    # The run reaches the whole path, not only the decoder.
    assert stats.outcomes["planned, applied, re-analysed"] > 100, stats.outcomes
    assert sum(v for k, v in stats.outcomes.items() if k.startswith("plan:")) > 100


def test_mutations_are_reproducible():
    import random

    from tensorflow.core.framework import graph_pb2

    corpus = fuzz_structured.seeds()
    a, b = (graph_pb2.GraphDef.FromString(corpus["mixed"]) for _ in range(2))
    assert fuzz_structured.mutate(random.Random(7), a) == fuzz_structured.mutate(
        random.Random(7), b
    )
    assert a == b

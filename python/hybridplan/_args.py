"""Checking arguments at the Python API boundary, in one place.

The Rust core takes machine types (``u64`` byte counts, ``u32`` node indices,
``bool`` flags, ``str`` names); a Python value that does not convert would
escape as ``OverflowError`` or ``TypeError`` from PyO3, naming no argument.
Every public function passes its arguments through these helpers first, so a
bad value becomes an :class:`InvalidArgumentError` that names the argument,
the value and what to pass instead.

Integers: ``int`` and NumPy integers (anything with ``__index__``), never
``bool``. Floats: ``int``/``float``/NumPy floating values that are finite.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from .errors import InvalidArgumentError

__all__ = [
    "U32_MAX",
    "U64_MAX",
    "count",
    "flag",
    "number",
    "optional_count",
    "parse_bytes",
    "profile_items",
    "tensor_name",
    "tflms_params",
]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def count(value: Any, what: str, *, low: int = 0, high: int = U64_MAX) -> int:
    """An integer in ``[low, high]`` (``int`` or a NumPy integer, not a bool)."""
    if _is_bool(value):
        raise InvalidArgumentError(f"{what} must be an int, not a bool ({value!r})")
    try:
        n = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be an int from {low} to {high}, got {type(value).__name__} {value!r}"
        ) from None
    if not low <= n <= high:
        raise InvalidArgumentError(f"{what} must be an int from {low} to {high}, got {n}")
    return n


def optional_count(value: Any, what: str, *, low: int = 0, high: int = U64_MAX) -> int | None:
    """``None`` or :func:`count`."""
    return None if value is None else count(value, what, low=low, high=high)


def number(value: Any, what: str, *, low: float = 0.0) -> float:
    """A finite real number ``>= low`` (int, float or a NumPy scalar, not a bool)."""
    if _is_bool(value) or isinstance(value, (str, bytes)):
        raise InvalidArgumentError(f"{what} must be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(
            f"{what} must be a number, got {type(value).__name__} {value!r}"
        ) from None
    if not math.isfinite(x) or x < low:
        bound = f" >= {low:g}" if math.isfinite(low) else ""
        raise InvalidArgumentError(f"{what} must be a finite number{bound}, got {value!r}")
    return x


def flag(value: Any, what: str) -> bool:
    """``True`` or ``False`` (a Python or NumPy bool; ``1`` is refused as ambiguous)."""
    if not _is_bool(value):
        raise InvalidArgumentError(f"{what} must be True or False, got {value!r}")
    return bool(value)


def tensor_name(value: Any, what: str = "loss") -> str | None:
    """``None`` or a tensor name such as ``"node:0"``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(
            f"{what} must be a tensor name such as 'dense/BiasAdd:0' (or None to infer it), "
            f"got {value!r}"
        )
    return value


def profile_items(profile: Any) -> list[tuple[int, float]] | None:
    """A profile ``{GraphDef node index: seconds}`` as sorted pairs for the core."""
    if profile is None:
        return None
    if not isinstance(profile, Mapping):
        raise InvalidArgumentError(
            "profile must be a dict {GraphDef node index: measured seconds} "
            f"(see hybridplan.profile), got {type(profile).__name__}"
        )
    items = [
        (
            count(k, "profile key (a GraphDef node index)", high=U32_MAX),
            number(v, f"profile[{k!r}] (seconds)"),
        )
        for k, v in profile.items()
    ]
    return sorted(items) or None


def tflms_params(tflms: Any) -> tuple[int, int, int] | None:
    """TFLMS's ``{"threshold", "ahead", "groupby"}`` (schedule positions, u32)."""
    if tflms is None:
        return None
    if not isinstance(tflms, Mapping):
        raise InvalidArgumentError(
            f"tflms must be a dict with threshold, ahead and groupby, got {tflms!r}"
        )
    unknown = set(tflms) - {"threshold", "ahead", "groupby"}
    if unknown:
        raise InvalidArgumentError(
            f"tflms takes threshold, ahead and groupby (schedule positions), "
            f"not {sorted(map(str, unknown))}"
        )
    t, a, g = (
        count(tflms.get(k, d), f"tflms[{k!r}] (schedule positions)", high=U32_MAX)
        for k, d in (("threshold", 0), ("ahead", 1), ("groupby", 1))
    )
    return t, a, g


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+]?[0-9]+)?)\s*([a-zA-Z]*)\s*")


def parse_bytes(value: Any, what: str = "budget") -> int:
    """A byte count from an int (or NumPy integer), a finite float, or a string such
    as ``"16GiB"``, ``"1.5e9"`` or ``"18446744073709551615"`` (exact: strings are
    read as decimals, not floats). Fractions of a byte are dropped.

    Raises:
        InvalidArgumentError: not a size, not positive, or 2^64 bytes or more.
    """
    if _is_bool(value):
        raise InvalidArgumentError(f"{what} must be a number of bytes, not a bool")
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        unit = m.group(2).lower() if m else None
        if m is None and _SIZE.fullmatch(value.strip().removeprefix("-")):
            raise InvalidArgumentError(f"{what} must be positive, got {value!r}")
        if m is None or unit not in _UNITS:
            raise InvalidArgumentError(
                f"{what} {value!r} is not a size: write e.g. 16GiB, 32GB, 500MiB or 123456789"
            )
        try:
            exact = Decimal(m.group(1)) * _UNITS[unit]
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            raise InvalidArgumentError(f"{what} {value!r} is not a size") from None
        if exact >= 2**64:
            raise InvalidArgumentError(f"{what} {value!r} is 2^64 bytes or more")
        value = int(exact)
    elif hasattr(value, "__index__"):
        value = operator.index(value)
    elif isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{what} must be finite, got {value}")
    else:
        raise InvalidArgumentError(
            f"{what} must be a number of bytes or a string like '16GiB', got {value!r}"
        )
    if value <= 0:
        raise InvalidArgumentError(f"{what} must be positive, got {value}")
    if value >= 2**64:
        raise InvalidArgumentError(f"{what} {value} is 2^64 bytes or more")
    return int(value)


def _is_mapping(x: Any) -> bool:
    """``isinstance(x, Mapping)``, without the ABC's check for a plain ``dict`` (a plan
    report of 10^5 swaps holds hundreds of thousands of them)."""
    return type(x) is dict or isinstance(x, Mapping)


def rewrite_spec(plan: Any) -> Mapping[str, Any]:
    """The shape of a plan the rewrite takes (``Plan.report``, the plan schema): a dict
    with lists ``swaps`` (each with ``node``, ``gate`` None or a dict with ``node``; its
    ``ins`` each with ``trigger``) and ``recomputes`` (each with ``nodes`` and
    ``trigger``). Indices are checked against the graph by the rewrite."""
    hint = "pass a hybridplan.Plan or its report"
    if not _is_mapping(plan):
        raise InvalidArgumentError(
            f"the plan must be a dict of swaps and recomputes ({hint}), got {type(plan).__name__}"
        )
    for key, needs in (("swaps", ("node",)), ("recomputes", ("nodes", "trigger"))):
        entries = plan.get(key, ())
        if isinstance(entries, (str, bytes, Mapping)) or not hasattr(entries, "__iter__"):
            raise InvalidArgumentError(f"plan[{key!r}] must be a list ({hint})")
        for i, e in enumerate(entries):
            if not _is_mapping(e) or not all(n in e for n in needs):
                raise InvalidArgumentError(
                    f"{key}[{i}] must be a dict with {', '.join(needs)} ({hint}), got {e!r}"[:300]
                )
            if key != "swaps":
                continue
            gate = e.get("gate")
            if gate is not None and not (_is_mapping(gate) and "node" in gate):
                raise InvalidArgumentError(
                    f"swaps[{i}].gate must be None or a dict with a node ({hint}), got {gate!r}"[
                        :300
                    ]
                )
            ins = e.get("ins", ())
            if isinstance(ins, (str, bytes, Mapping)) or not hasattr(ins, "__iter__"):
                raise InvalidArgumentError(f"swaps[{i}].ins must be a list ({hint})")
            for j, entry in enumerate(ins):
                if not _is_mapping(entry) or "trigger" not in entry:
                    raise InvalidArgumentError(
                        f"swaps[{i}].ins[{j}] must be a dict with a trigger ({hint})"
                    )
    return plan

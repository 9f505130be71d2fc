"""SBP annotations, in both spellings the compiler reads: OneFlow's ("S(0)", "B", "P",
"P(sum)", "P(max)") and DTensor's ("Shard(0)", "Replicate", "Partial", "Partial(max)"); spaces
are ignored. parse() checks one (as compiler/sbp.cc's ParseSbp) and returns its OneFlow form;
the constructors write them.

    job.variable("w", [16, 4], sbp=[loom.sbp.Shard(1)])   # the same as sbp=["S(1)"]
"""

import re

B = "B"
P = "P"
Replicate = "Replicate"
Partial = "Partial"

_SPLIT = re.compile(r"^(?:S|Shard)\((\d+)\)$")
_BROADCAST = {"B", "Replicate", "Replicate()"}
_PARTIAL_SUM = {"P", "P(sum)", "Partial", "Partial()", "Partial(sum)"}
_PARTIAL_MAX = {"P(max)", "Partial(max)"}


def S(axis):
    """OneFlow's split along `axis`: "S(axis)"."""
    return f"S({_axis(axis)})"


def Shard(axis):
    """DTensor's split along `axis`: "Shard(axis)"."""
    return f"Shard({_axis(axis)})"


def _axis(axis):
    if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
        raise ValueError(f"a split axis is an integer >= 0, got {axis!r}")
    return axis


def parse(text):
    """The OneFlow form of one SBP ("S(1)", "B", "P", "P(max)"); ValueError naming the text."""
    if not isinstance(text, str):
        raise ValueError(f"an SBP is a string such as 'S(0)', 'B' or 'P', got {text!r}")
    compact = re.sub(r"[ \t]", "", text)
    if compact in _BROADCAST:
        return "B"
    if compact in _PARTIAL_SUM:
        return "P"
    if compact in _PARTIAL_MAX:
        return "P(max)"
    match = _SPLIT.match(compact)
    if match and int(match.group(1)) < 2**31:
        return f"S({int(match.group(1))})"
    raise ValueError(f"cannot parse SBP '{text}' (expected S(axis), B or P, or Shard(axis), "
                     "Replicate or Partial)")

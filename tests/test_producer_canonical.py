"""The convention's canonical JSON, digests and patches, checked against outside references.

RFC 8785's own examples for canonical JSON, `jsonpatch` for the patches `diff` writes, and
the worked example in docs/convention.md, which must replay and verify as printed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from pathlib import Path
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st
from statetrail_producer.canonical import JSON, canonical_json, digest, es_number
from statetrail_producer.patch import diff

ROOT = Path(__file__).resolve().parents[1]


def test_producer_canonical_matches_rfc8785_example() -> None:
    # RFC 8785 section 3.2.2 (the input is parsed JSON, as a consumer would have it).
    parsed = json.loads(
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        '"literals": [null, true, false]}'
    )
    assert canonical_json(parsed) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


def test_producer_canonical_sorts_keys_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3's sorting example: U+1F600 sorts before U+FB33 in UTF-16.
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    text = canonical_json({k: i for i, k in enumerate(keys)})
    order = [json.loads("{" + part + "}") for part in re.findall(r'"[^"]*":\d', text[1:-1])]
    assert [next(iter(o)) for o in order] == [
        "\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_producer_canonical_numbers_follow_ecmascript() -> None:
    assert es_number(-0.0) == "0"
    cases = {0.0: "0", 1.0: "1", 100.0: "100", 0.1: "0.1", -1.5: "-1.5",
             1e21: "1e+21", 1e20: "100000000000000000000", 1.5e-7: "1.5e-7",
             1e-6: "0.000001", 123456789012345680000.0: "123456789012345680000",
             5e-324: "5e-324", 1.7976931348623157e308: "1.7976931348623157e+308"}
    for number, text in cases.items():
        assert es_number(number) == text, number
    # IEEE 754 hex examples from RFC 8785 appendix B.
    appendix_b = {
        "4340000000000001": "9007199254740994", "4430000000000000": "295147905179352830000",
        "44b52d02c7e14af5": "9.999999999999997e+22", "44b52d02c7e14af7": "1.0000000000000001e+23",
        "444b1ae4d6e2ef4f": "999999999999999900000", "444b1ae4d6e2ef50": "1e+21",
        "3eb0c6f7a0b5ed8c": "9.999999999999997e-7", "3eb0c6f7a0b5ed8d": "0.000001",
        "41b3de4355555557": "333333333.33333343", "becbf647612f3696": "-0.0000033333333333333333",
        "43143ff3c1cb0959": "1424953923781206.2", "8000000000000001": "-5e-324",
    }
    for bits, text in appendix_b.items():
        number = struct.unpack(">d", bytes.fromhex(bits))[0]
        assert not math.isnan(number)
        assert es_number(number) == text, bits


def test_producer_canonical_digest_of_the_empty_state() -> None:
    assert digest(canonical_json({})) == hashlib.sha256(b"{}").hexdigest() == (
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(old=_json, new=_json)
def test_producer_canonical_diff_applies_with_jsonpatch(old: JSON, new: JSON) -> None:
    document = {"v": old}
    target = {"v": new}
    patched = jsonpatch.apply_patch(document, diff(document, target))
    assert canonical_json(patched) == canonical_json(target)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.integers(0, 3), max_size=8), extra=st.lists(st.integers(0, 3), max_size=4))
def test_producer_canonical_list_appends_are_adds_at_explicit_indexes(
        items: list[int], extra: list[int]) -> None:
    ops = diff({"l": list(items)}, {"l": [*items, *extra]})
    assert ops == [{"op": "add", "path": f"/l/{len(items) + i}", "value": v}
                   for i, v in enumerate(extra)]


def test_producer_canonical_docs_worked_example_replays_and_verifies() -> None:
    page = (ROOT / "docs" / "convention.md").read_text(encoding="utf-8")
    example = page.split("## 8. Worked example", 1)[1]
    block = re.search(r"```json\n(.*?)```", example, re.DOTALL)
    assert block is not None
    spans: list[dict[str, Any]] = json.loads(block.group(1))
    events = [e["attributes"] for s in spans for e in s["events"]]
    start = next(e for e in events if "statetrail.state.start" in e)
    state = json.loads(start["statetrail.state.start"])
    assert digest(canonical_json(state)) == start["statetrail.state.start.digest"]
    transitions = sorted((e for e in events if "statetrail.transition.patch" in e),
                         key=lambda e: e["statetrail.store.sequence"])
    for event in transitions:
        state = jsonpatch.apply_patch(state, json.loads(event["statetrail.transition.patch"]))
        assert digest(canonical_json(state)) == event["statetrail.state.digest"]
    owner = spans[-1]["attributes"]
    assert state == json.loads(owner["statetrail.state.end"])
    assert digest(canonical_json(state)) == owner["statetrail.state.end.digest"]

"""Executions' states and graph are stored compressed and read back exactly as received."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from collector.store.documents import pack, unpack


@given(st.text())
def test_a_packed_document_reads_back_as_the_same_text(text: str) -> None:
    stored = pack(text)
    assert isinstance(stored, bytes)
    assert unpack(stored) == text


def test_a_lone_surrogate_survives_packing() -> None:
    # JSON may escape half of a surrogate pair; a str then holds what UTF-8 cannot.
    text = json.loads('"\\ud800 and \\udfff"')
    assert unpack(pack(text)) == text


def test_a_missing_document_stays_missing() -> None:
    assert pack(None) is None
    assert unpack(None) is None


def test_a_large_state_is_stored_smaller() -> None:
    state = '{"items": [' + ",".join(f'{{"index": {i}, "text": "turn {i}"}}' for i in range(500))
    stored = pack(state + "]}")
    assert stored is not None and len(stored) * 4 < len(state)

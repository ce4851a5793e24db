"""Executions' states and graph are stored compressed and read back exactly as received."""

from __future__ import annotations

import json
import zlib

from hypothesis import given
from hypothesis import strategies as st

from collector.encode.documents import packed_column, unpack


def _packed(texts: list[str | None]) -> list[bytes | None]:
    column: list[bytes | None] = packed_column(texts).to_pylist()
    return column


@given(st.lists(st.one_of(st.none(), st.text()), max_size=20))
def test_every_packed_document_reads_back_as_the_same_text(texts: list[str | None]) -> None:
    stored = _packed(texts)
    assert [unpack(data) for data in stored] == texts


def test_a_lone_surrogate_survives_packing() -> None:
    # JSON may escape half of a surrogate pair; a str then holds what UTF-8 cannot.
    text = json.loads('"\\ud800 and \\udfff"')
    assert [unpack(data) for data in _packed([text])] == [text]


def test_a_missing_document_stays_missing() -> None:
    assert _packed([None, None]) == [None, None]
    assert unpack(None) is None


def test_an_empty_document_is_not_missing() -> None:
    stored = _packed(["", None])
    assert stored[0] is not None and stored[1] is None
    assert unpack(stored[0]) == ""


def test_a_large_state_is_stored_smaller() -> None:
    state = '{"items": [' + ",".join(f'{{"index": {i}, "text": "turn {i}"}}' for i in range(500))
    (stored,) = _packed([state + "]}"])
    assert stored is not None and len(stored) * 4 < len(state)


def test_a_document_stored_by_earlier_versions_still_reads_back() -> None:
    # Before zstd, each document was its own zlib stream (level 1): files
    # written then keep those bytes.
    text = '{"refund": {"eligible": true}, "note": "caf\u00e9"}'
    assert unpack(zlib.compress(text.encode("utf-8"), 1)) == text

"""Run ids as path segments (studio/links.py): every id has an address, and it round-trips."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from studio.links import Links, run_id_from_segment, run_id_segment

# Any text telemetry can carry, lone surrogates included (JSON allows them).
ANY_TEXT = st.text(st.characters(exclude_categories=[]), min_size=1)
NANOID = st.text(st.sampled_from("ABCXYZabcxyz0189_-"), min_size=1)


@given(run_id=ANY_TEXT)
def test_every_run_id_is_one_plain_segment_that_reads_back_as_itself(run_id: str) -> None:
    segment = run_id_segment(run_id)
    assert re.fullmatch(r"[A-Za-z0-9_:~-]+", segment)
    assert run_id_from_segment(segment) == run_id


@given(run_id=NANOID)
def test_junjo_run_ids_keep_their_addresses(run_id: str) -> None:
    assert run_id_segment(run_id) == run_id
    assert Links("/st").execution(run_id) == f"/st/executions/{run_id}"


def test_text_that_is_not_tilde_encoding_is_read_as_it_is() -> None:
    # What an address typed by hand holds: percent-decoded by the server already.
    assert run_id_from_segment("run/provenance") == "run/provenance"
    assert run_id_from_segment("a~b ~4") == "a~b ~4"
    # Well-formed escapes of bytes that are not UTF-8 stay text too.
    assert run_id_from_segment("x~FF~FE") == "x~FF~FE"
    assert run_id_from_segment("agent~3Aapplication") == "agent:application"


def test_an_agents_application_store_run_reads_as_it_is() -> None:
    run_id = "V1StGXR8_Z5jdHi6B-myT:application"
    assert run_id_segment(run_id) == run_id

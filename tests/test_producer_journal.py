"""StateJournal: commits, rollbacks, rejects, bad calls, and hostile or huge values.

Every run is replayed from its emitted start state with `jsonpatch` and checked step by step
against the digests and against the journal's own record.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from producer_evidence import Capture, attrs
from statetrail_producer import JournalError, Policy, StateJournal


def _journal(capture: Capture, state: dict[str, Any] | None = None, **options: Any) -> StateJournal:
    return StateJournal("orders", store_id="order-7", tracer_provider=capture.provider,
                        **options).start(state or {})


def test_producer_journal_writes_and_commit_replay_to_the_journal_record() -> None:
    capture = Capture()
    journal = _journal(capture, {"status": "new", "items": ["a"]})
    journal.set("status", "checking", action="check")
    journal.set("/items/-", "b")
    journal.set("/profile", {"name": "Ann", "tags": []})
    with journal.transaction(action="approve"):
        journal.set("/profile/tags/-", "vip")
        journal.set("status", "approved")
        journal.remove("/items/0")
        assert journal.get("/items") == ["b"]
        assert journal.state["items"] == ["a", "b"], "uncommitted writes stay out of the record"
    record = journal.state
    journal.finish()
    evidence = capture.evidence()
    run_id = journal.run_id
    steps = evidence.replay(run_id)
    assert steps[-1].state == record == {
        "status": "approved", "items": ["b"], "profile": {"name": "Ann", "tags": ["vip"]}}
    assert evidence.verified_end(run_id) == record
    assert [s.attributes["statetrail.transition.action"] for s in steps[1:]] == [
        "check", "set", "set", "approve"]
    assert json.loads(steps[2].attributes["statetrail.transition.patch"]) == [
        {"op": "add", "path": "/items/1", "value": "b"}]
    commit = steps[-1].attributes
    assert len(json.loads(commit["statetrail.transition.patch"])) == 3
    assert commit["statetrail.transaction.id"]
    assert commit["statetrail.transaction.begin_time_unix_nano"] > 0
    owner = attrs(evidence.owner(run_id))
    assert owner["statetrail.store.id"] == "order-7"
    assert owner["statetrail.run.kind"] == "journal"
    assert owner["statetrail.run.status"] == "completed"


def test_producer_journal_rollback_records_discarded_writes_and_changes_nothing() -> None:
    capture = Capture()
    journal = _journal(capture, {"balance": 10})
    with pytest.raises(RuntimeError, match="card declined"), journal.transaction(action="pay"):
        journal.set("balance", 0)
        journal.set("paid", True)
        raise RuntimeError("card declined")
    journal.begin(action="refund")
    journal.set("balance", 20)
    journal.rollback(reason="operator cancelled")
    assert journal.state == {"balance": 10}
    assert journal.sequence == 0, "a rollback uses no sequence number"
    journal.set("balance", 11)
    journal.finish()
    evidence = capture.evidence()
    rollbacks = evidence.events("statetrail.transaction.rollback")
    assert [json.loads(r["statetrail.transaction.discarded"]) for r in rollbacks] == [
        [{"op": "replace", "path": "/balance", "value": 0},
         {"op": "add", "path": "/paid", "value": True}],
        [{"op": "replace", "path": "/balance", "value": 20}],
    ]
    assert [r["statetrail.transaction.reason"] for r in rollbacks] == [
        "RuntimeError: card declined", "operator cancelled"]
    assert [r["statetrail.transition.action"] for r in rollbacks] == ["pay", "refund"]
    assert all(r["statetrail.store.sequence.last"] == 0 for r in rollbacks)
    steps = evidence.replay(journal.run_id)
    assert [s.state for s in steps] == [{"balance": 10}, {"balance": 11}]


def test_producer_journal_reject_records_the_update_field_and_message() -> None:
    capture = Capture()
    journal = _journal(capture, {"age": 30})
    journal.set("age", 31)
    journal.reject({"age": -1}, "/age", "age must be >= 0", action="birthday")
    journal.reject({"name": 5}, None, "wrong type")
    assert journal.state == {"age": 31}
    journal.finish()
    evidence = capture.evidence()
    rejections = evidence.events("statetrail.rejection")
    assert [(json.loads(r["statetrail.rejection.update"]), r["statetrail.rejection.field"],
             r["statetrail.rejection.message"], r["statetrail.store.sequence.last"])
            for r in rejections] == [({"age": -1}, "/age", "age must be >= 0", 1),
                                     ({"name": 5}, "", "wrong type", 1)]
    assert rejections[0]["statetrail.transition.action"] == "birthday"
    assert len(evidence.replay(journal.run_id)) == 2


def test_producer_journal_no_op_advances_the_sequence_not_the_revision() -> None:
    capture = Capture()
    journal = _journal(capture, {"a": 1})
    journal.set("a", 1)
    journal.remove("missing")
    journal.finish()
    steps = capture.evidence().replay(journal.run_id)
    assert [(s.sequence, s.attributes.get("statetrail.transition.patch")) for s in steps[1:]] == [
        (1, "[]"), (2, "[]")]
    assert steps[-1].attributes["statetrail.store.revision.after"] == 0


def test_producer_journal_bad_calls_raise_and_record_nothing() -> None:
    capture = Capture()
    journal = StateJournal("x", tracer_provider=capture.provider)
    with pytest.raises(JournalError, match="start"):
        journal.set("a", 1)
    journal.start({"a": {"b": [1]}})
    before = len(capture.exporter.get_finished_spans())
    for path in ("/missing/child", "/a/b/7", "/a/b/x", "", "/a/~2"):
        with pytest.raises(JournalError):
            journal.set(path, 1)
    with pytest.raises(JournalError, match="no transaction"):
        journal.commit()
    journal.begin()
    with pytest.raises(JournalError, match="nest"):
        journal.begin()
    with pytest.raises(JournalError):
        journal.set("/nope/x", 1)
    journal.rollback()
    assert journal.state == {"a": {"b": [1]}} and journal.sequence == 0
    assert len(capture.exporter.get_finished_spans()) == before + 1, "only the rollback"
    journal.finish()
    with pytest.raises(JournalError, match="finished"):
        journal.set("a", 2)


def test_producer_journal_end_state_given_by_the_application_exposes_untracked_writes() -> None:
    capture = Capture()
    journal = _journal(capture, {"n": 1})
    journal.set("n", 2)
    journal.finish({"n": 3}, error=ValueError("lost a write"))
    evidence = capture.evidence()
    steps = evidence.replay(journal.run_id)
    owner = attrs(evidence.owner(journal.run_id))
    assert json.loads(owner["statetrail.state.end"]) == {"n": 3}
    assert owner["statetrail.state.end.digest"] != steps[-1].digest
    assert owner["statetrail.run.status"] == "failed"
    assert owner["error.type"] == "ValueError"


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float


def test_producer_journal_non_json_values_follow_the_projection() -> None:
    capture = Capture()
    journal = _journal(capture)
    moment = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    values: dict[str, Any] = {
        "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
        "big": 2**64, "small": -(2**53), "bytes": b"\x00\x01\xfe", "when": moment,
        "day": moment.date(), "span": datetime.timedelta(minutes=1, seconds=30),
        "colour": Colour.RED, "id": uuid.UUID(int=1), "price": decimal.Decimal("0.10"),
        "tuple": (1, "a"), "set": {3, 1, 2},
        "keys": {1: "one", None: "none", 2.5: "half", ("a", 1): "pair"},
        "point": Point(1, 2.5), "surrogate": "a\ud800b", "float": 1e21, "zero": -0.0,
        "object": object(), "cycle": cyclic,
    }
    for key, value in values.items():
        journal.set(key, value)
    record = journal.state
    journal.finish()
    end = capture.evidence().verified_end(journal.run_id)
    assert end == record
    expected = {
        "nan": "NaN", "inf": "Infinity", "ninf": "-Infinity", "big": "18446744073709551616",
        "small": "-9007199254740992", "bytes": "AAH+", "when": "2025-01-02T03:04:05+00:00",
        "day": "2025-01-02", "span": 90.0, "colour": "red",
        "id": "00000000-0000-0000-0000-000000000001", "price": "0.10", "tuple": [1, "a"],
        "set": [1, 2, 3], "keys": {"1": "one", "null": "none", "2.5": "half", "('a', 1)": "pair"},
        "point": {"x": 1, "y": 2.5}, "surrogate": "a\ufffdb", "float": 1e21, "zero": 0.0,
    }
    for key, value in expected.items():
        assert end[key] == value, key
    assert end["object"].startswith("<object object at")
    depth = 0
    node = end["cycle"]
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert node == "[truncated: depth]" and depth == 127


def test_producer_journal_deep_nesting_is_cut_at_the_depth_limit() -> None:
    capture = Capture()
    journal = _journal(capture)
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(500):
        node["n"] = {}
        node = node["n"]
    journal.set("deep", deep)
    journal.finish()
    evidence = capture.evidence()
    (transition,) = evidence.transitions(journal.run_id)
    assert transition["statetrail.transition.patch.mode"] == "truncated"
    end = evidence.verified_end(journal.run_id)
    assert attrs(evidence.owner(journal.run_id))["statetrail.state.end.mode"] == "truncated"
    levels, value = 1, end
    while isinstance(value, dict):
        value, levels = value.get("deep", value.get("n")), levels + 1  # type: ignore[assignment]
    assert value == "[truncated: depth]" and levels == 129


def test_producer_journal_huge_strings_full_or_truncated() -> None:
    huge = "x" * (5 * 1024 * 1024)
    capture = Capture()
    journal = _journal(capture, {"doc": huge})
    journal.set("doc", huge + "y")
    journal.set("small", 1)
    journal.finish()
    evidence = capture.evidence()
    steps = evidence.replay(journal.run_id)
    assert steps[1].state["doc"] == huge + "y"
    assert len(steps[2].attributes["statetrail.transition.patch"]) < 100, "a small write is small"

    capture = Capture()
    journal = _journal(capture, {"doc": huge}, policy=Policy(max_string_length=1000))
    journal.set("doc", huge + "y")
    journal.finish()
    evidence = capture.evidence()
    start = evidence.start(journal.run_id)
    assert start["statetrail.state.start.mode"] == "truncated"
    assert len(start["statetrail.state.start"]) < 1100
    end = evidence.verified_end(journal.run_id)
    assert end["doc"] == "x" * 1000 + f"...[truncated {len(huge) + 1} chars]"


def test_producer_journal_redacts_listed_paths_everywhere() -> None:
    capture = Capture()
    policy = Policy(redact=("/user/password", "/tokens/*"))
    journal = _journal(capture, {"user": {"name": "ann", "password": "hunter2"}}, policy=policy)
    journal.set("/user/password", "s3cret")
    journal.set("tokens", ["t1", "t2"])
    journal.reject({"user": {"password": "pw9x"}}, "/user/password", "too few characters")
    journal.finish()
    evidence = capture.evidence()
    text = json.dumps([dict(e.attributes or {}) for s in capture.exporter.get_finished_spans()
                       for e in s.events] + [attrs(evidence.owner(journal.run_id))])
    for secret in ("hunter2", "s3cret", "t1", "pw9x"):
        assert secret not in text
    end = evidence.verified_end(journal.run_id)
    assert end == {"user": {"name": "ann", "password": "[redacted]"},
                   "tokens": ["[redacted]", "[redacted]"]}
    assert evidence.start(journal.run_id)["statetrail.state.start.mode"] == "redacted"
    assert json.loads(evidence.start(journal.run_id)["statetrail.policy"])["redact"] == [
        "/user/password", "/tokens/*"]


def test_producer_journal_without_an_sdk_still_keeps_its_record() -> None:
    journal = StateJournal("plain").start({"a": 1})
    journal.set("b", 2)
    assert journal.state == {"a": 1, "b": 2}
    journal.finish()

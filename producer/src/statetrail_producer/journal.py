"""StateJournal: the convention for any store, driven by the application's own calls.

A journal records one run of one store. `start(state)` sends the start state; each `set` or
`remove` outside a transaction commits one transition (its patch is the operation itself,
its digest the recorded state's); `transaction()` groups writes into one transition, or,
when rolled back, into a rollback event that changes nothing; `reject` records an update
that failed validation; `finish` sends the end state and the outcome. An application's
state class can forward its mutations here as a journal sink. Paths are JSON Pointers
(`"/profile/name"`), a plain top-level key (`"count"`), or a sequence of segments; a bad
path raises `JournalError` and records nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, cast

from opentelemetry.trace import TracerProvider

from statetrail_producer import keys
from statetrail_producer.canonical import JSON, Policy, compact_json, load_json, mode_of
from statetrail_producer.emitter import RunEmitter, get_tracer, new_id
from statetrail_producer.patch import PatchError, apply, json_equal
from statetrail_producer.pointer import PointerError, format_pointer, parse
from statetrail_producer.state import Change, RecordedState

Path = str | Sequence[str | int]


class JournalError(ValueError):
    """A journal call that cannot be recorded: a bad path, or a call out of order."""


@dataclasses.dataclass
class _Transaction:
    id: str
    begin_ns: int
    action: str | None
    ops: list[str] = dataclasses.field(default_factory=list)
    # Top-level fields copied on first write; edits go here until commit.
    overlay: dict[str, JSON] = dataclasses.field(default_factory=dict)
    removed: set[str] = dataclasses.field(default_factory=set)
    special: bool = False
    truncated: bool = False
    redacted: bool = False


class StateJournal:
    """The state-evidence journal of one run of one store."""

    def __init__(
        self,
        name: str,
        *,
        store_id: str | None = None,
        kind: str = "journal",
        framework: str = "statetrail-journal",
        framework_version: str | None = None,
        parent_run_id: str | None = None,
        policy: Policy | None = None,
        tracer_provider: TracerProvider | None = None,
        sequence_start: int = 0,
        revision_start: int | None = None,
    ) -> None:
        self._name = name
        self._store_id = store_id or new_id()
        self._kind = kind
        self._framework = framework
        self._framework_version = framework_version or _own_version(framework)
        self._parent_run_id = parent_run_id
        self._state = RecordedState(policy or Policy())
        self._tracer = get_tracer(tracer_provider)
        self._sequence_start = sequence_start
        self._revision_start = revision_start
        self._sequence = sequence_start
        self._emitter: RunEmitter | None = None
        self._transaction: _Transaction | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, state: Mapping[str, Any] | None = None, *, graph: str | None = None) -> Self:
        """Begin the run from `state` (a mapping; `{}` when omitted) and send it."""
        if self._emitter is not None:
            raise JournalError("the journal was already started")
        if state is not None and not isinstance(state, Mapping):
            raise JournalError(f"the state must be a mapping, not {type(state).__name__}")
        self._state.load(state or {})
        self._emitter = RunEmitter(
            self._tracer, name=self._name, kind=self._kind, framework=self._framework,
            framework_version=self._framework_version, store_id=self._store_id,
            parent_id=self._parent_run_id,
        )
        self._emitter.start(self._state, sequence=self._sequence_start,
                            revision=self._revision_start, graph=graph)
        return self

    def finish(self, end_state: Mapping[str, Any] | None = None, *,
               error: BaseException | None = None, status: str | None = None) -> None:
        """End the run. `end_state`, when given, is recorded as the application's own end
        state (a replay that does not reach it shows untracked writes); an open transaction
        is rolled back first."""
        emitter = self._running()
        if self._transaction is not None:
            self.rollback(reason=_reason(error) if error is not None else "run finished")
        final = self._state
        if end_state is not None:
            final = RecordedState(self._state.policy)
            final.load(end_state)
        outcome = status or (keys.STATUS_FAILED if error is not None else keys.STATUS_COMPLETED)
        emitter.finish(final, status=outcome, error=error)

    def __enter__(self) -> Self:
        if self._emitter is None:
            self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._emitter is not None and not self._emitter.finished:
            self.finish(error=error)

    # -- reads -------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        if self._emitter is None:
            raise JournalError("start() the journal first")
        return self._emitter.run_id

    @property
    def store_id(self) -> str:
        return self._store_id

    @property
    def sequence(self) -> int:
        """The sequence of the last committed transition (the start's before any)."""
        return self._sequence

    @property
    def state(self) -> dict[str, JSON]:
        """A copy of the recorded (projected) state; an open transaction's writes excluded."""
        return self._state.snapshot()

    def get(self, path: Path, default: JSON = None) -> JSON:
        """A copy of the recorded value at `path` (inside a transaction, with its writes)."""
        segments = _segments(path)
        transaction = self._transaction
        document: JSON = self._state.document()
        if transaction is not None and segments:
            top = segments[0]
            if top in transaction.removed:
                return default
            if top in transaction.overlay:
                document = {top: transaction.overlay[top]}
        exists, value = _lookup(document, segments)
        return load_json(compact_json(value)) if exists else default

    # -- writes ------------------------------------------------------------------------

    def set(self, path: Path, value: Any, *, action: str = "set") -> None:
        """Write `value` at `path` (its parent must exist; `-` appends to a list)."""
        segments = self._write_segments(path)
        transaction = self._transaction
        if transaction is not None:
            exists = self._in_overlay(transaction, segments)
            segments = _resolve_append(transaction.overlay, segments)
        else:
            segments = _resolve_append(self._state.document(), segments)
        projected, projector = self._state.project(value, segments)
        pointer = format_pointer(segments)
        if transaction is not None:
            op = {"op": "replace" if exists else "add", "path": pointer, "value": projected}
            self._apply_in_transaction(transaction, segments, op)
            transaction.special |= projector.special
            transaction.truncated |= projector.truncated
            transaction.redacted |= projector.redacted
            return
        exists, current = _lookup(self._state.document(), segments)
        if exists and json_equal(current, projected):
            self._commit(Change([]), action)
            return
        op = {"op": "replace" if exists else "add", "path": pointer, "value": projected}
        change = Change([op], projector.truncated, projector.redacted, projector.special)
        self._apply(change)
        self._commit(change, action)

    def remove(self, path: Path, *, action: str = "remove") -> None:
        """Remove the value at `path`; removing what is absent is a no-op transition."""
        segments = self._write_segments(path)
        op = {"op": "remove", "path": format_pointer(segments)}
        transaction = self._transaction
        if transaction is not None:
            if self._in_overlay(transaction, segments):
                self._apply_in_transaction(transaction, segments, op)
            return
        exists, _ = _lookup(self._state.document(), segments)
        if not exists:
            self._commit(Change([]), action)
            return
        change = Change([op])
        self._apply(change)
        self._commit(change, action)

    def update(self, values: Mapping[str, Any], *, action: str) -> None:
        """Set several top-level fields as one transition (a node's returned update)."""
        if self._transaction is not None:
            for key, value in values.items():
                self.set([key], value)
            return
        with self.transaction(action=action):
            for key, value in values.items():
                self.set([key], value)

    def reject(self, update: Any, field: Path | None, message: str, *,
               action: str | None = None) -> None:
        """Record an update refused by validation; the state does not change."""
        emitter = self._running()
        projected, projector = self._state.project(update, ())
        pointer = "" if field is None else format_pointer(_segments(field))
        emitter.rejection(update_json=compact_json(projected),
                          mode=mode_of(projector.truncated, projector.redacted),
                          field=pointer, message=message, action=action)

    # -- transactions ------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, action: str | None = None) -> Iterator[Self]:
        """Writes in the block commit together as one transition; an exception rolls them
        back (recorded with the discarded writes) and propagates."""
        self.begin(action=action)
        try:
            yield self
        except BaseException as error:
            if self._transaction is not None:
                self.rollback(reason=_reason(error))
            raise
        if self._transaction is not None:
            self.commit()

    def begin(self, *, action: str | None = None) -> str:
        """Open a transaction; returns its id. Transactions do not nest."""
        self._running()
        if self._transaction is not None:
            raise JournalError("a transaction is already open (transactions do not nest)")
        self._transaction = _Transaction(new_id(), time.time_ns(), action)
        return self._transaction.id

    def commit(self) -> None:
        """Commit the open transaction as one transition (also when it wrote nothing)."""
        transaction = self._open_transaction()
        self._transaction = None
        for key in transaction.removed:
            self._state.drop_field(key)
        for key, value in transaction.overlay.items():
            self._state.put_field(key, value, special=transaction.special or
                                  (key in self._state and self._state.field_flags(key)[0]),
                                  truncated=transaction.truncated, redacted=transaction.redacted)
        patch_json = "[" + ",".join(transaction.ops) + "]"
        ops = load_json(patch_json)
        assert isinstance(ops, list)
        change = Change(cast(list[dict[str, Any]], ops), transaction.truncated,
                        transaction.redacted)
        self._commit(change, transaction.action or "transaction",
                     transaction=(transaction.id, transaction.begin_ns), patch_json=patch_json)

    def rollback(self, *, reason: str | None = None) -> None:
        """Discard the open transaction's writes, recording them; the state does not change."""
        transaction = self._open_transaction()
        self._transaction = None
        self._running().rollback(
            transaction_id=transaction.id, begin_ns=transaction.begin_ns,
            discarded_json="[" + ",".join(transaction.ops) + "]",
            mode=mode_of(transaction.truncated, transaction.redacted),
            reason=reason, action=transaction.action,
        )

    # -- internals ---------------------------------------------------------------------

    def _running(self) -> RunEmitter:
        if self._emitter is None:
            raise JournalError("start() the journal first")
        if self._emitter.finished:
            raise JournalError("the journal's run has finished")
        return self._emitter

    def _open_transaction(self) -> _Transaction:
        self._running()
        if self._transaction is None:
            raise JournalError("no transaction is open")
        return self._transaction

    def _write_segments(self, path: Path) -> list[str]:
        self._running()
        segments = _segments(path)
        if not segments:
            raise JournalError("write a field of the state, not the whole state")
        return segments

    def _apply(self, change: Change) -> None:
        try:
            self._state.apply(change)
        except PatchError as error:
            raise JournalError(str(error)) from None

    def _in_overlay(self, transaction: _Transaction, segments: list[str]) -> bool:
        top = segments[0]
        if top not in transaction.overlay and top not in transaction.removed and top in self._state:
            transaction.overlay[top] = self._state.field_copy(top)
        return _lookup(transaction.overlay, segments)[0]

    def _apply_in_transaction(self, transaction: _Transaction, segments: list[str],
                              op: dict[str, Any]) -> None:
        try:
            apply(transaction.overlay, op)
        except PatchError as error:
            raise JournalError(str(error)) from None
        top = segments[0]
        if top in transaction.overlay:
            transaction.removed.discard(top)
        else:
            transaction.removed.add(top)
        # Serialized now: a later write in the same transaction may edit this value in place.
        transaction.ops.append(compact_json(op))

    def _commit(self, change: Change, action: str, *, transaction: tuple[str, int] | None = None,
                patch_json: str | None = None) -> None:
        emitter = self._running()
        self._sequence += 1
        emitter.transition(self._state, change, sequence=self._sequence, action=action,
                           transaction=transaction, patch_json=patch_json)


def _segments(path: Path) -> list[str]:
    if isinstance(path, str):
        if path.startswith("/") or path == "":
            try:
                return parse(path)
            except PointerError as error:
                raise JournalError(str(error)) from None
        return [path]
    return [str(segment) for segment in path]


def _lookup(document: JSON, segments: list[str]) -> tuple[bool, JSON]:
    node = document
    for segment in segments:
        if isinstance(node, dict) and segment in node:
            node = node[segment]
        elif (isinstance(node, list) and segment.isdigit()
              and int(segment) < len(node) and str(int(segment)) == segment):
            node = node[int(segment)]
        else:
            return False, None
    return True, node


def _resolve_append(document: JSON, segments: list[str]) -> list[str]:
    """`-` (append) as the explicit index it will take, so patches name real positions."""
    if segments[-1] != "-":
        return segments
    exists, parent = _lookup(document, segments[:-1])
    if exists and isinstance(parent, list):
        return [*segments[:-1], str(len(parent))]
    return segments


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _own_version(framework: str) -> str | None:
    if framework != "statetrail-journal":
        return None
    try:
        return importlib.metadata.version("statetrail-producer")
    except importlib.metadata.PackageNotFoundError:
        return None

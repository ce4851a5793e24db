"""How a run ended, for the banner of its page: where it failed, or what was cut short.

Pure: the run's status and its trace's waterfall in, an `Outcome` out. Junjo marks
every span around a failure ERROR (SCHEMA.md section 6), so the node that raised is a
failed span of the run's own level with no failed span of that level below it; a
failed child run is searched the same way, since its own error is the one worth
reading. A run that raised between nodes has no culprit, only the node that ended
last; a cancelled run's culprits are its innermost `junjo.cancelled` spans. Only
Junjo's spans are culprits (an LLM client's ERROR span is a detail inside the node).

Invariant: read only from spans that arrived, so the banner can say less, never
something false.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from collector.model import ExecutionStatus
from collector.producers.junjo import AGENT_OPERATION_TYPE
from studio.links import Links
from studio.render.bounded import cut_line, cut_text
from studio.render.waterfall import MESSAGE_CHARS, NAME_CHARS, Waterfall, WaterfallRow, own_level

# Telemetry can nest child runs in a cycle: the search stops this deep.
MAX_CHILD_DEPTH: Final = 16
# Span types a culprit is named by; anything else (a RunConcurrent, a plain node) is a node.
_RUN_KINDS: Final = frozenset({"workflow", "subflow", "agent"})


@dataclass(frozen=True, slots=True)
class Culprit:
    """A span the run's end is traced to: the node that raised, or one that was running.
    `href` is its row on this page, or a child run's page; `cause` is what raised inside
    that child run, when its spans say."""

    name: str
    # "node", "operation" (an agent's model request or tool), or the child run's
    # kind: "subflow", "agent", "workflow".
    kind: str
    span_id: str
    href: str
    error_type: str | None
    message: str
    cancelled_reason: str | None
    run_id: str | None = None
    cause: Culprit | None = None

    @property
    def innermost(self) -> Culprit:
        """The deepest cause: the node that really raised (or ran), however deep the runs nest."""
        found = self
        while found.cause is not None:
            found = found.cause
        return found

    @property
    def path(self) -> tuple[Culprit, ...]:
        """The causes inside this one, outermost first: each child run down to the node."""
        found: list[Culprit] = []
        cause = self.cause
        while cause is not None:
            found.append(cause)
            cause = cause.cause
        return tuple(found)

    @property
    def innermost_run(self) -> Culprit:
        """The child run the innermost cause ran in (this one if it has no cause)."""
        found = self
        while found.cause is not None and found.cause.cause is not None:
            found = found.cause
        return found


@dataclass(frozen=True, slots=True)
class Outcome:
    """A failed or cancelled run's end: what it raised or why it stopped, and where."""

    status: ExecutionStatus
    error_type: str | None
    message: str
    cancelled_reason: str | None
    # Failed: the spans that raised. Cancelled: the spans that were running.
    culprits: tuple[Culprit, ...]
    # Failed: spans cancelled because of the failure (RunConcurrent siblings).
    stopped: tuple[Culprit, ...] = ()
    # Failed with no culprit (the run itself raised: an edge condition, no edge
    # that applies, a subflow's pre- or post-run actions): its node that ended last.
    after: Culprit | None = None


def ended_badly(status: ExecutionStatus, error_type: str | None) -> bool:
    """Whether a run has a banner: it failed or was cancelled (an error type without an
    error status, a producer's quirk, counts as failed)."""
    return status in ("error", "cancelled") or error_type is not None


def outcome(
    status: ExecutionStatus,
    error_type: str | None,
    message: str,
    cancelled_reason: str | None,
    waterfall: Waterfall,
    links: Links,
) -> Outcome | None:
    """The banner of a failed or cancelled run; None for one that ended well (`ended_badly`)."""
    if not ended_badly(status, error_type):
        return None
    message = cut_text(message, MESSAGE_CHARS)
    error_type = None if error_type is None else cut_line(error_type, NAME_CHARS)
    if cancelled_reason is not None:
        cancelled_reason = cut_text(cancelled_reason, MESSAGE_CHARS)
    failed = status == "error" or error_type is not None
    owner = next((row for row in waterfall.rows if row.is_owner), None)
    rows = waterfall.rows
    if owner is None:
        return Outcome(status, error_type, message, cancelled_reason, ())
    if failed:
        culprits = _culprits(rows, owner, "error", links)
        return Outcome(
            "error", error_type, message, cancelled_reason, culprits,
            _culprits(rows, owner, "cancelled", links, follow=False),
            after=None if culprits else _ended_last(rows, owner, links),
        )
    return Outcome(
        status, error_type, message, cancelled_reason,
        _culprits(rows, owner, "cancelled", links),
    )


def _culprits(
    rows: Sequence[WaterfallRow],
    owner: WaterfallRow,
    status: ExecutionStatus,
    links: Links,
    *,
    follow: bool = True,
    depth: int = 0,
) -> tuple[Culprit, ...]:
    """The owner's own spans with `status` that no other of them with it is below.

    `follow` searches a child run's own level for its culprit (what raised
    inside a failed subflow); stopped siblings need no more than their names.
    """
    level = own_level(rows, owner)
    marked = [row for row in level if row.status == status and _by_junjo(row)]
    above = _ancestors_of(marked, {row.span_id: row for row in level})
    found: list[Culprit] = []
    for row in marked:
        if row.span_id in above:
            continue
        cause = None
        if follow and row.run_id is not None and depth < MAX_CHILD_DEPTH:
            cause = next(iter(_culprits(rows, row, status, links, depth=depth + 1)), None)
        found.append(_culprit(row, links, cause))
    return tuple(found)


def _ended_last(
    rows: Sequence[WaterfallRow], owner: WaterfallRow, links: Links
) -> Culprit | None:
    """The owner's own node (or child run) that ended last: where a run that raised
    between its nodes had got to. None if none of them arrived."""
    level = [row for row in own_level(rows, owner) if _by_junjo(row)]
    if not level:
        return None
    last = max(level, key=lambda row: (row.offset_nano + row.duration_nano, row.offset_nano))
    return _culprit(last, links, None)


def _by_junjo(row: WaterfallRow) -> bool:
    """A span Junjo made: an executable's (it has a span type) or an agent operation's."""
    return row.span_type is not None or _is_operation(row)


def _is_operation(row: WaterfallRow) -> bool:
    return any(attribute.key == AGENT_OPERATION_TYPE for attribute in row.attributes)


def _ancestors_of(rows: Sequence[WaterfallRow], level: dict[str, WaterfallRow]) -> set[str]:
    """The spans of the level that sit above any of `rows`."""
    found: set[str] = set()
    for row in rows:
        parent = level.get(row.parent_span_id)
        while parent is not None and parent.span_id not in found:
            found.add(parent.span_id)
            parent = level.get(parent.parent_span_id)
    return found


def _culprit(row: WaterfallRow, links: Links, cause: Culprit | None) -> Culprit:
    exception = row.exceptions[0] if row.exceptions else None
    is_run = row.run_id is not None and row.span_type in _RUN_KINDS
    return Culprit(
        name=row.name,
        kind=(
            row.span_type if is_run and row.span_type
            else "operation" if _is_operation(row) else "node"
        ),
        span_id=row.span_id,
        href=links.execution(row.run_id) if is_run and row.run_id else f"#span-{row.span_id}",
        error_type=row.error_type or (exception.type if exception else None) or None,
        message=row.status_message or (exception.message if exception else ""),
        cancelled_reason=row.cancelled_reason,
        run_id=row.run_id if is_run else None,
        cause=cause,
    )


def outcome_json(found: Outcome | None) -> dict[str, Any] | None:
    """The banner as the JSON API answers it: the same facts, addresses left out."""
    if found is None:
        return None
    return {
        "status": found.status,
        "error_type": found.error_type,
        "message": found.message,
        "cancelled_reason": found.cancelled_reason,
        "culprits": [_culprit_json(culprit) for culprit in found.culprits],
        "stopped": [_culprit_json(culprit) for culprit in found.stopped],
        "after": _culprit_json(found.after) if found.after is not None else None,
    }


def _culprit_json(culprit: Culprit) -> dict[str, Any]:
    return {
        "name": culprit.name,
        "kind": culprit.kind,
        "span_id": culprit.span_id,
        "run_id": culprit.run_id,
        "error_type": culprit.error_type,
        "message": culprit.message,
        "cancelled_reason": culprit.cancelled_reason,
        "cause": _culprit_json(culprit.cause) if culprit.cause is not None else None,
    }

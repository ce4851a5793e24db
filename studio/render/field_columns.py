"""What the executions list adds for a `where` filter: the values, and why nothing matched.

After "which runs" come "with what value" and "who set it": the list shows each run's
end value of the filtered paths (as Datasette shows the filtered column), linked to
its provenance; an array, or a `[*]` path, shows its first few values and their count.
When nothing matches, the usual cause is a misspelled path or a value
of the wrong type, so the field index is asked what the path holds. No SQL here.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from collector.index.query_ast import (
    ANY,
    Compare,
    Expr,
    Path,
    Scalar,
    comparisons,
    format_path,
    paths_of,
    pattern_path,
)
from collector.store import Store
from collector.store.filters import FieldValue, Matches
from collector.store.listing import ExecutionRow
from studio.render.bounded import cut_line

MAX_COLUMNS: Final = 3
VALUE_CHARS: Final = 60
# An array's (or a `[*]` path's) values shown in its cell, each cut to ITEM_CHARS.
PREVIEW_ITEMS: Final = 3
ITEM_CHARS: Final = 24
# Sibling names read to suggest a spelling; a wider object gets no suggestion.
SIBLINGS_READ: Final = 500


@dataclass(frozen=True, slots=True)
class ValueColumn:
    label: str  # the path as the filter language writes it
    pointer: str  # `~*` and `~-1` for `[*]` and `[-1]` (query_ast.Wildcard)

    @property
    def path(self) -> Path:
        return pattern_path(self.pointer)

    @property
    def provenance_pointer(self) -> str:
        """The field whose provenance a cell links to: the path up to its first wildcard."""
        return self.path.concrete_prefix.pointer


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    kind: str  # a JSON kind, or "absent" when the end state lacks the path


@dataclass(frozen=True, slots=True)
class Hint:
    """Why a filter may have matched nothing; `replacement` is a corrected filter text."""

    message: str
    suggestion: str | None = None
    replacement: str | None = None
    href: str | None = None  # the list with `replacement` as its filter (set by the view)


def value_columns(expr: Expr | None) -> tuple[ValueColumn, ...]:
    """One column per path the filter tests, the first MAX_COLUMNS of them."""
    if expr is None:
        return ()
    return tuple(
        ValueColumn(format_path(path), path.pointer) for path in paths_of(expr)[:MAX_COLUMNS]
    )


def value_cells(
    store: Store, rows: Sequence[ExecutionRow], columns: Sequence[ValueColumn]
) -> dict[str, tuple[Cell, ...]]:
    """Each row's end value in each column, keyed by run id."""
    found = _end_values(store, rows, columns)
    if found is None:
        return {}
    previews = _previews(store, rows, columns, found)
    return {
        row.run_id: tuple(
            _cell(found.get((row.run_id, c.pointer)), previews.get((row.run_id, c.pointer)), c)
            for c in columns
        )
        for row in rows
    }


def _cell(value: FieldValue | None, preview: Matches | None, column: ValueColumn) -> Cell:
    if column.path.is_pattern:
        return Cell("—", "absent") if preview is None else preview_cell(preview, "matches")
    if value is not None and value[0] == "array":
        return preview_cell(preview or Matches((), 0), "array")
    return value_cell(value)


def _previews(
    store: Store,
    rows: Sequence[ExecutionRow],
    columns: Sequence[ValueColumn],
    found: dict[tuple[str, str], FieldValue],
) -> dict[tuple[str, str], Matches]:
    """The first values of each `[*]` column and of each array, keyed as `found` is."""
    previews: dict[tuple[str, str], Matches] = {}
    for column in columns:
        path = column.path
        if path.is_pattern:
            run_ids = [row.run_id for row in rows]
        else:
            run_ids = [
                row.run_id for row in rows
                if (found.get((row.run_id, column.pointer)) or ("",))[0] == "array"
            ]
            path = Path((*path.tokens, ANY))
        if run_ids:
            matches = store.final_matches(run_ids, path, PREVIEW_ITEMS)
            previews.update(((run_id, column.pointer), m) for run_id, m in matches.items())
    return previews


def preview_cell(matches: Matches, kind: str) -> Cell:
    """An array's (or a `[*]` path's) first values and their number, on one line:
    `["horse", "laser", …] 12`; each value cut to ITEM_CHARS, the whole to VALUE_CHARS."""
    items = [cut_line(value_cell(value).text, ITEM_CHARS) for value in matches.first]
    more = matches.count > len(items)
    text = "[" + ", ".join([*items, "…"] if more else items) + "]"
    if more:
        text += f" {matches.count:,}"
    return Cell(cut_line(text, VALUE_CHARS), kind)


def value_json(
    store: Store, rows: Sequence[ExecutionRow], columns: Sequence[ValueColumn]
) -> dict[str, list[dict[str, object]]]:
    """The JSON API's twin of `value_cells`: each run's end values, typed, keyed by run id.

    An object is named by its kind only (`value` null): the state API has it whole.
    An array, and a `[*]` path (kind `matches`), adds its first values (`first`:
    scalars, null for a container) and their number (`count`).
    """
    found = _end_values(store, rows, columns)
    if found is None:
        return {}
    previews = _previews(store, rows, columns, found)
    answer: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        fields: list[dict[str, object]] = []
        for column in columns:
            value = found.get((row.run_id, column.pointer))
            preview = previews.get((row.run_id, column.pointer))
            if column.path.is_pattern:
                value = None if preview is None else ("matches", None)
            kind, scalar = value if value is not None else ("absent", None)
            field: dict[str, object] = {
                "path": column.pointer, "kind": kind, "value": _json(scalar)
            }
            if kind in ("array", "matches"):
                shown = preview or Matches((), 0)
                field["first"] = [_json(v) for _, v in shown.first]
                field["count"] = shown.count
            fields.append(field)
        answer[row.run_id] = fields
    return answer


def _json(scalar: float | str | bool | None) -> float | str | bool | None:
    if isinstance(scalar, float) and exact_integer(scalar):
        return int(scalar)
    return scalar


def _end_values(
    store: Store, rows: Sequence[ExecutionRow], columns: Sequence[ValueColumn]
) -> dict[tuple[str, str], FieldValue] | None:
    """The index's end values of these columns in these runs; None when nothing is asked."""
    if not columns or not rows:
        return None
    paths = [column.path for column in columns if not column.path.is_pattern]
    return store.final_values([row.run_id for row in rows], paths) if paths else {}


def empty_hints(store: Store, expr: Expr | None, where_text: str) -> tuple[Hint, ...]:
    """What may be wrong with a filter that matched nothing, one hint per suspect path."""
    if expr is None:
        return ()
    hints: list[Hint] = []
    compares = [node for node in comparisons(expr) if isinstance(node, Compare)]
    for path in paths_of(expr)[:MAX_COLUMNS]:
        label = format_path(path)
        kinds = store.field_kinds(path)
        if not kinds:
            hints.append(_unknown_path(store, path, label, where_text))
            continue
        wanted = {_kind_of(c.value) for c in compares if c.path == path and c.op != "contains"}
        if wanted and not wanted & kinds:
            held = " or ".join(sorted(kinds))
            asked = " or ".join(sorted(wanted))
            hints.append(
                Hint(f"{label} holds {held} values in the runs stored, and the filter "
                     f"compares it with {asked}.")
            )
    return tuple(hints)


def _unknown_path(store: Store, path: Path, label: str, where_text: str) -> Hint:
    """No run has `path`: suggest the nearest spelling of its first unknown name.

    The nearest ancestor that some run has is found by climbing; the name below
    it is compared with that ancestor's children, and the rest of the path is
    kept, so `refund.eligble.reason` suggests `refund.eligible.reason`.
    """
    message = f"No run stored has a field {label}."
    parent = path.parent
    while True:
        siblings = store.field_children(parent, SIBLINGS_READ)
        if siblings:
            depth = len(parent.tokens)
            wanted = path.tokens[depth]
            names = [name for p in siblings if isinstance(name := pattern_path(p).tokens[-1], str)]
            close = (
                difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
                if isinstance(wanted, str)
                else []
            )
            if close:
                best = format_path(Path((*parent.tokens, close[0], *path.tokens[depth + 1 :])))
                # Rewritten only when the path is written once: a blind replace could
                # also change a string value or a longer path that contains it.
                replaced = where_text.replace(label, best) if where_text.count(label) == 1 else None
                return Hint(message, best, replaced)
            if parent.tokens:
                shown = [format_path(pattern_path(p)) for p in siblings[:5]]
                more = " …" if len(siblings) > 5 else ""
                return Hint(f"{message} Fields under {format_path(parent)}: "
                            f"{', '.join(shown)}{more}.")
            return Hint(message)
        if not parent.tokens:
            return Hint(message)
        parent = parent.parent


def _kind_of(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, int | float) else "string"


def value_cell(value: FieldValue | None) -> Cell:
    """One run's end value of a column, as the list shows it (cut short, typed)."""
    if value is None:
        return Cell("—", "absent")
    kind, scalar = value
    if kind == "object":
        return Cell("{…}", kind)
    if kind == "array":
        return Cell("[…]", kind)
    if kind == "number" and isinstance(scalar, float):
        return Cell(str(int(scalar)) if exact_integer(scalar) else repr(scalar), kind)
    text = json.dumps(scalar, ensure_ascii=False)
    if len(text) > VALUE_CHARS:
        text = text[: VALUE_CHARS - 1] + "…"
    return Cell(text, kind)


def exact_integer(number: float) -> bool:
    """Whether a number the index holds (as a double) reads back as the integer it equals.

    The index keeps no int/float distinction (JSON has none: 1 and 1.0 are one
    number), so integral values read as integers, the common case. -0.0 keeps
    its sign: as an integer it would read 0.
    """
    return (
        math.isfinite(number)
        and number.is_integer()
        and abs(number) < 2**53
        and math.copysign(1.0, number) > 0
    )

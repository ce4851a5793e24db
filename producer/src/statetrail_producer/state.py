"""A store's recorded state: the projection the convention's patches and digests describe.

The state is a JSON object; each top-level field keeps its projection and that projection's
canonical text, so a transition re-encodes only the fields it touched, and the digest of
the whole state joins the cached texts. Values handed in are projected here (adapters pass
the framework's own objects); the recorded projections are this object's own, never shared
with the application, so an application editing its objects in place cannot rewrite history.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from statetrail_producer.canonical import (
    JSON,
    Policy,
    Projector,
    canonical_json,
    digest,
    json_string,
    load_json,
    mode_of,
    utf16_key,
)
from statetrail_producer.patch import apply, diff
from statetrail_producer.pointer import escape, parse


@dataclasses.dataclass
class Change:
    """The operations one update made, and whether their values were truncated or redacted."""

    ops: list[dict[str, Any]]
    truncated: bool = False
    redacted: bool = False
    # A value holds a float or a non-BMP key (see canonical_json's fast path).
    special: bool = False

    @property
    def mode(self) -> str:
        return mode_of(self.truncated, self.redacted)

    def absorb(self, projector: Projector) -> None:
        self.truncated |= projector.truncated
        self.redacted |= projector.redacted
        self.special |= projector.special


@dataclasses.dataclass
class _Field:
    value: JSON
    canonical: str
    special: bool
    truncated: bool
    redacted: bool


class RecordedState:
    """The projected state of one store, field by field."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._fields: dict[str, _Field] = {}
        # The object each field was last projected from: an unchanged object is not re-read.
        self._sources: dict[str, object] = {}
        # The canonical member order (and quoted keys) of the current set of fields.
        self._order_of: tuple[str, ...] = ()
        self._order: list[tuple[str, str]] = []

    def load(self, raw: Mapping[str, object]) -> None:
        """Replace the whole state with the projection of `raw`."""
        self._fields.clear()
        self._sources.clear()
        for key, value in raw.items():
            self._fields[key] = self._project_field(key, value)
            self._sources[key] = value

    def track(self, raw: Mapping[str, object], written: Collection[str]) -> Change:
        """Follow the framework's state to `raw`: the fields whose object changed, or that
        were `written` (an object edited in place keeps its identity), are re-projected and
        diffed; the others are kept as they are."""
        change = Change([])
        for key in [k for k in self._fields if k not in raw]:
            change.ops.append({"op": "remove", "path": "/" + escape(key)})
            del self._fields[key]
            self._sources.pop(key, None)
        for key, value in raw.items():
            if key not in written and key in self._sources and self._sources[key] is value:
                continue
            old = self._fields.get(key)
            if old is not None and self._appended(key, old, value, change):
                continue
            self._sources[key] = value
            fresh = self._project_field(key, value)
            if old is not None and old.canonical == fresh.canonical:
                continue
            change.truncated |= fresh.truncated
            change.redacted |= fresh.redacted
            if old is None:
                change.ops.append({"op": "add", "path": "/" + escape(key), "value": fresh.value})
            else:
                change.ops.extend(diff(old.value, fresh.value, "/" + escape(key)))
            self._fields[key] = fresh
        return change

    def _appended(self, key: str, old: _Field, value: object, change: Change) -> bool:
        """A list that only grew (a reducer such as `operator.add` builds a new list holding
        the old items): project and add just the new items. Items are compared by identity,
        so an item edited in place would go unseen; frameworks treat state as immutable."""
        source = self._sources.get(key)
        if (type(value) is not list or type(source) is not list or value is source
                or not isinstance(old.value, list) or len(old.value) != len(source)
                or len(value) < len(source)
                or not all(a is b for a, b in zip(source, value, strict=False))):
            return False
        start = len(source)
        projector = Projector(self.policy)
        items = [projector.project(item, (key, str(start + i)))
                 for i, item in enumerate(value[start:])]
        self._sources[key] = value
        if not items:
            return True
        special = old.special or projector.special
        texts = ",".join(canonical_json(item, special) for item in items)
        canonical = old.canonical[:-1] + ("," if old.value else "") + texts + "]"
        self._fields[key] = _Field([*old.value, *items], canonical, special,
                                   old.truncated or projector.truncated,
                                   old.redacted or projector.redacted)
        change.absorb(projector)
        path = "/" + escape(key)
        change.ops.extend({"op": "add", "path": f"{path}/{start + i}", "value": item}
                          for i, item in enumerate(items))
        return True

    def apply(self, change: Change) -> None:
        """Apply operations whose values are already projected (atomic for one operation)."""
        document = self.document()
        touched: set[str] = set()
        for op in change.ops:
            apply(document, op)
            for pointer in (op.get("path"), op.get("from")):
                if isinstance(pointer, str) and pointer:
                    touched.add(parse(pointer)[0])
        for key in touched:
            self._sources.pop(key, None)
            if key not in document:
                self._fields.pop(key, None)
                continue
            old = self._fields.get(key)
            was_special = old.special if old is not None else False
            uses_special = was_special or change.special
            value = document[key]
            self._fields[key] = _Field(
                value, canonical_json(value, uses_special), uses_special,
                (old.truncated if old is not None else False) or change.truncated,
                (old.redacted if old is not None else False) or change.redacted,
            )

    def put_field(self, key: str, value: JSON, *, special: bool, truncated: bool,
                  redacted: bool) -> None:
        """Install an already projected field (a committed transaction's working copy)."""
        self._sources.pop(key, None)
        self._fields[key] = _Field(value, canonical_json(value, special), special, truncated,
                                   redacted)

    def drop_field(self, key: str) -> None:
        self._sources.pop(key, None)
        self._fields.pop(key, None)

    def project(self, value: object, segments: Iterable[str]) -> tuple[JSON, Projector]:
        """Project a value that will sit at `segments` under this state's policy."""
        projector = Projector(self.policy)
        return projector.project(value, tuple(segments)), projector

    def document(self) -> dict[str, JSON]:
        """The recorded fields as one object. It shares the recorded values: read-only."""
        return {key: f.value for key, f in self._fields.items()}

    def snapshot(self) -> dict[str, JSON]:
        """An independent copy of the recorded state."""
        return {key: load_json(f.canonical) for key, f in self._fields.items()}

    def field(self, key: str) -> JSON:
        return self._fields[key].value

    def field_copy(self, key: str) -> JSON:
        return load_json(self._fields[key].canonical)

    def field_flags(self, key: str) -> tuple[bool, bool, bool]:
        """(special, truncated, redacted) of a recorded field."""
        f = self._fields[key]
        return f.special, f.truncated, f.redacted

    def __contains__(self, key: object) -> bool:
        return key in self._fields

    def canonical(self) -> str:
        """The canonical JSON of the whole state, joined from the fields' cached texts."""
        keys = tuple(self._fields)
        if keys != self._order_of:
            self._order_of = keys
            self._order = [(k, json_string(k)) for k in sorted(keys, key=utf16_key)]
        fields = self._fields
        return "{" + ",".join(f"{quoted}:{fields[k].canonical}" for k, quoted in self._order) + "}"

    def digest(self) -> str:
        return digest(self.canonical())

    def mode(self) -> str:
        fields = self._fields.values()
        return mode_of(any(f.truncated for f in fields), any(f.redacted for f in fields))

    def _project_field(self, key: str, value: object) -> _Field:
        projector = Projector(self.policy)
        projected = projector.project(value, (key,))
        return _Field(projected, canonical_json(projected, projector.special), projector.special,
                      projector.truncated, projector.redacted)

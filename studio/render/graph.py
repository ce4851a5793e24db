"""View model of an execution graph: Junjo's compiled graph laid out for an SVG.

Pure: a span's `junjo.workflow.execution_graph_snapshot` (SCHEMA.md section 5) and
each node's runs in; boxes, edges and labels in integer SVG coordinates out, so the
template only copies numbers (the CSP forbids inline styles). Layers run top to bottom
by longest path, ignoring loop edges, which are drawn as curves on the right; only
this graph's own level is drawn, a subflow being one box linked to its run.

Nodes are joined to spans by structural id, except a subflow, whose structural id
every subflow of its shape shares: it is joined by its definition id (its runtime id
in this snapshot). Bounded: a graph past MAX_GRAPH_NODES or MAX_GRAPH_LINKS is refused
with a GraphError the page shows instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from collector.producers.junjo import WORKFLOW_NODE_COUNT
from collector.replay.jsondoc import MAX_JSON_DEPTH, Missing, parse_json
from studio.render.bounded import cut_line
from studio.render.waterfall import WaterfallRow, own_level

NODE_HEIGHT: Final = 40
CHILD_HEIGHT: Final = 30
GAP_X: Final = 36
GAP_Y: Final = 56
PAD: Final = 24
LOOP_MARGIN: Final = 90
CHAR_WIDTH: Final = 8
MIN_NODE_WIDTH: Final = 96
MAX_LABEL_CHARS: Final = 32
MAX_TITLE_CHARS: Final = 200
# A larger graph is refused with a note: layering is quadratic, and no real one comes close.
MAX_GRAPH_NODES: Final = 500
MAX_GRAPH_LINKS: Final = 2000


class GraphError(ValueError):
    """The snapshot is not a graph this page can draw; the message says why."""


@dataclass(frozen=True, slots=True)
class NodeRun:
    """How often a graph node ran in this execution, and whether any run failed."""

    count: int = 0
    failed: bool = False
    # Stopped before it finished (a RunConcurrent sibling failed, or the run was cancelled).
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class _Node:
    runtime_id: str
    structural_ids: tuple[str, ...]
    label: str
    node_type: str
    is_subflow: bool
    children: tuple[str, ...]
    inner: tuple[str, ...]  # a subflow's source and sinks, which belong to its own graph


@dataclass(frozen=True, slots=True)
class ChildBox:
    """A RunConcurrent child drawn inside its group box; `href` links a subflow to its run."""

    label: str
    x: int
    y: int
    width: int
    height: int
    run: NodeRun
    subflow: bool = False
    href: str | None = None


@dataclass(frozen=True, slots=True)
class NodeBox:
    """One drawn node: a rounded rect at (x, y); `href` links a subflow to its run."""

    runtime_id: str
    label: str
    title: str
    kind: str  # "node" | "subflow" | "concurrent"
    x: int
    y: int
    width: int
    height: int
    run: NodeRun
    href: str | None
    children: tuple[ChildBox, ...] = ()

    @property
    def center_x(self) -> int:
        return self.x + self.width // 2


@dataclass(frozen=True, slots=True)
class EdgePath:
    """An SVG path `d`, its condition label and where to put it; `loop` closes a cycle."""

    d: str
    label: str | None
    label_x: int
    label_y: int
    loop: bool


@dataclass(frozen=True, slots=True)
class GraphView:
    width: int
    height: int
    nodes: tuple[NodeBox, ...]
    edges: tuple[EdgePath, ...]
    executed: int
    total: int
    # Some of the run's spans never arrived: a node without one may have run.
    incomplete: bool = False


@dataclass
class _Layered:
    layers: list[list[str]] = field(default_factory=list)
    layer_of: dict[str, int] = field(default_factory=dict)


def node_runs(rows: Sequence[WaterfallRow]) -> dict[str, NodeRun]:
    """Runs per structural id among the spans this execution itself ran: not below a
    nested owner (its graph's), but the owner's own span, a subflow's by definition id."""
    owner = next((row for row in rows if row.is_owner), None)
    if owner is None:
        return {}
    runs: dict[str, NodeRun] = {}
    for row in own_level(rows, owner):
        key = _run_key(row)
        if key is None:
            continue
        seen = runs.get(key, NodeRun())
        runs[key] = NodeRun(
            seen.count + 1,
            seen.failed or row.status == "error",
            seen.cancelled or row.status == "cancelled",
        )
    return runs


def _run_key(row: WaterfallRow) -> str | None:
    if row.span_type == "subflow" and row.definition_id is not None:
        return row.definition_id
    return row.structural_id


def spans_lost(rows: Sequence[WaterfallRow], runs: Mapping[str, NodeRun]) -> bool:
    """Whether the workflow span counted more node runs than there are spans to show them
    (`runs` also counts what Junjo leaves out, so this can miss a loss, never invent one)."""
    owner = next((row for row in rows if row.is_owner), None)
    if owner is None:
        return False
    declared = next(
        (a.preview for a in owner.attributes if a.key == WORKFLOW_NODE_COUNT), None
    )
    # ASCII only: str.isdigit() also admits digits such as '²', which int() refuses.
    if declared is None or not (declared.isascii() and declared.isdigit()):
        return False
    return int(declared) > sum(run.count for run in runs.values())


def layout(
    snapshot_json: str,
    runs: Mapping[str, NodeRun],
    subflow_links: Mapping[str, str] | None = None,
) -> GraphView:
    """Lay out the snapshot's own level.

    `runs` and `subflow_links` (to a URL) are keyed as `node_runs` keys: a
    subflow by its definition id, when its span has one, else by structural id.
    """
    nodes, edges = _parse(snapshot_json)
    nested = _nested_ids(nodes, edges)
    top = [node for node in nodes.values() if node.runtime_id not in nested]
    if not top:
        raise GraphError("the execution graph snapshot has no nodes")
    top_ids = {node.runtime_id for node in top}
    own_edges = [
        edge
        for edge in edges
        if edge.get("parentSubflowRuntimeId") is None
        and edge.get("tailNodeRuntimeId") in top_ids
        and edge.get("headNodeRuntimeId") in top_ids
    ]
    pairs = [(str(e["tailNodeRuntimeId"]), str(e["headNodeRuntimeId"])) for e in own_edges]
    loops = _loop_edges(top[0].runtime_id, [n.runtime_id for n in top], pairs)
    layered = _layers([n.runtime_id for n in top], pairs, loops)
    boxes = _place(layered, nodes, runs, subflow_links or {})
    paths = [
        _edge_path(boxes[tail], boxes[head], _label(edge), (tail, head) in loops)
        for edge, (tail, head) in zip(own_edges, pairs, strict=True)
    ]
    width = max(box.x + box.width for box in boxes.values()) + PAD
    for path in paths:
        if path.loop:
            # Loop labels sit to the right of their curve (text-anchor start).
            label_end = path.label_x + CHAR_WIDTH * len(path.label or "") + PAD
            width = max(width, label_end, path.label_x + LOOP_MARGIN)
    height = max(box.y + box.height for box in boxes.values()) + PAD
    drawn = tuple(boxes[node_id] for layer in layered.layers for node_id in layer)
    counted = [c.run for b in drawn for c in b.children] + [
        b.run for b in drawn if b.kind != "concurrent"
    ]
    return GraphView(
        width=width,
        height=height,
        nodes=drawn,
        edges=tuple(paths),
        executed=sum(run.count > 0 for run in counted),
        total=len(counted),
    )


# --- parsing ---------------------------------------------------------------------------


def _parse(snapshot_json: str) -> tuple[dict[str, _Node], list[dict[str, Any]]]:
    snapshot: Any = parse_json(snapshot_json)
    if isinstance(snapshot, Missing):
        raise GraphError(
            "the execution graph snapshot is not JSON this page can read (malformed, or "
            f"nested deeper than {MAX_JSON_DEPTH} levels)"
        )
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("nodes"), list):
        raise GraphError("the execution graph snapshot has no node list")
    _check_size(snapshot)
    nodes: dict[str, _Node] = {}
    for raw in snapshot["nodes"]:
        if not isinstance(raw, dict) or not isinstance(raw.get("nodeRuntimeId"), str):
            raise GraphError("a node of the execution graph snapshot has no runtime id")
        structural = (raw.get("nodeStructuralId"), raw.get("subflowGraphStructuralId"))
        label = str(raw.get("nodeLabel") or raw.get("nodeType") or raw["nodeRuntimeId"])
        children = raw.get("childNodeRuntimeIds")
        sinks = raw.get("subflowSinkNodeRuntimeIds")
        inner = [raw.get("subflowSourceNodeRuntimeId"), *(sinks if isinstance(sinks, list) else [])]
        nodes[raw["nodeRuntimeId"]] = _Node(
            runtime_id=raw["nodeRuntimeId"],
            structural_ids=tuple(s for s in structural if isinstance(s, str)),
            label=label,
            node_type=str(raw.get("nodeType") or ""),
            is_subflow=raw.get("isSubflow") is True,
            children=tuple(str(c) for c in children) if isinstance(children, list) else (),
            inner=tuple(str(i) for i in inner if isinstance(i, str)),
        )
    raw_edges = snapshot.get("edges")
    raw_edges = raw_edges if isinstance(raw_edges, list) else []
    edges = [
        e
        for e in raw_edges
        if isinstance(e, dict)
        and e.get("tailNodeRuntimeId") in nodes
        and e.get("headNodeRuntimeId") in nodes
    ]
    return nodes, edges


def _check_size(snapshot: dict[str, Any]) -> None:
    """Refuse a graph too large to lay out and draw in a bounded time and page."""
    raw_nodes: list[Any] = snapshot["nodes"]
    raw_edges = snapshot.get("edges")
    links = _length(raw_edges) + sum(
        _length(raw.get("childNodeRuntimeIds")) for raw in raw_nodes if isinstance(raw, dict)
    )
    if len(raw_nodes) > MAX_GRAPH_NODES or links > MAX_GRAPH_LINKS:
        raise GraphError(
            f"it is too large to draw here ({len(raw_nodes):,} nodes and {links:,} edges "
            f"and groupings; this page draws at most {MAX_GRAPH_NODES:,} nodes and "
            f"{MAX_GRAPH_LINKS:,} edges and groupings)"
        )


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _nested_ids(nodes: Mapping[str, _Node], edges: Sequence[Mapping[str, Any]]) -> set[str]:
    """Nodes drawn elsewhere: inside a subflow's own graph, or inside a concurrent group."""
    nested: set[str] = set()
    for edge in edges:
        if edge.get("parentSubflowRuntimeId") is not None:
            nested.update((str(edge["tailNodeRuntimeId"]), str(edge["headNodeRuntimeId"])))
    for node in nodes.values():
        nested.update(child for child in node.children if child in nodes)
        nested.update(inner for inner in node.inner if inner in nodes)
    return nested


def _label(edge: Mapping[str, Any]) -> str | None:
    label = edge.get("edgeConditionLabel")
    return _cut(str(label)) if label else None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


# --- layering --------------------------------------------------------------------------


def _loop_edges(
    first: str, order: Sequence[str], pairs: Sequence[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Edges that close a cycle, found by a depth-first search from the first node."""
    successors: dict[str, list[str]] = {node: [] for node in order}
    for tail, target in pairs:
        successors[tail].append(target)
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    loops: set[tuple[str, str]] = set()
    for root in [first, *order]:
        if root in state:
            continue
        stack = [(root, iter(successors[root]))]
        state[root] = 1
        while stack:
            node, pending = stack[-1]
            head: str | None = next(pending, None)
            if head is None:
                state[node] = 2
                stack.pop()
            elif state.get(head) == 1:
                loops.add((node, head))
            elif head not in state:
                state[head] = 1
                stack.append((head, iter(successors[head])))
    return loops


def _layers(
    order: Sequence[str], pairs: Sequence[tuple[str, str]], loops: set[tuple[str, str]]
) -> _Layered:
    """Longest-path layering over the edges that do not close a loop (a DAG)."""
    forward = [(t, h) for t, h in pairs if (t, h) not in loops and t != h]
    indegree = {node: 0 for node in order}
    for _, head in forward:
        indegree[head] += 1
    layer_of = {node: 0 for node in order}
    ready = [node for node in order if indegree[node] == 0]
    while ready:
        node = ready.pop(0)
        for tail, head in forward:
            if tail != node:
                continue
            layer_of[head] = max(layer_of[head], layer_of[node] + 1)
            indegree[head] -= 1
            if indegree[head] == 0:
                ready.append(head)
    result = _Layered(layer_of=layer_of)
    for node in order:
        while len(result.layers) <= layer_of[node]:
            result.layers.append([])
        result.layers[layer_of[node]].append(node)
    return result


# --- geometry --------------------------------------------------------------------------


def _text_width(label: str) -> int:
    return max(MIN_NODE_WIDTH, len(label) * CHAR_WIDTH + 32)


def _run_of(node: _Node, runs: Mapping[str, NodeRun]) -> NodeRun:
    if node.is_subflow and node.runtime_id in runs:
        return runs[node.runtime_id]
    found = [runs[s] for s in node.structural_ids if s in runs]
    return NodeRun(
        sum(r.count for r in found), any(r.failed for r in found), any(r.cancelled for r in found)
    )


def _children(node: _Node, nodes: Mapping[str, _Node], runs: Mapping[str, NodeRun]) -> list[
    tuple[str, int, NodeRun, _Node]
]:
    return [
        (
            _cut(nodes[c].label),
            _text_width(_cut(nodes[c].label)),
            _run_of(nodes[c], runs),
            nodes[c],
        )
        for c in node.children
        if c in nodes
    ]


def _link_of(node: _Node, links: Mapping[str, str]) -> str | None:
    if node.is_subflow and node.runtime_id in links:
        return links[node.runtime_id]
    return next((links[s] for s in node.structural_ids if s in links), None)


def _size(node: _Node, nodes: Mapping[str, _Node], runs: Mapping[str, NodeRun]) -> tuple[int, int]:
    own = _text_width(_cut(node.label))
    children = _children(node, nodes, runs)
    if not children:
        return own, NODE_HEIGHT
    inner = sum(width for _, width, _, _ in children) + 12 * (len(children) + 1)
    return max(own, inner), NODE_HEIGHT + CHILD_HEIGHT + 10


def _place(
    layered: _Layered,
    nodes: Mapping[str, _Node],
    runs: Mapping[str, NodeRun],
    links: Mapping[str, str],
) -> dict[str, NodeBox]:
    sizes = {node_id: _size(nodes[node_id], nodes, runs) for node_id in layered.layer_of}
    row_widths = [
        sum(sizes[n][0] for n in layer) + GAP_X * (len(layer) - 1) for layer in layered.layers
    ]
    widest = max(row_widths)
    boxes: dict[str, NodeBox] = {}
    y = PAD
    for layer, row_width in zip(layered.layers, row_widths, strict=True):
        x = PAD + (widest - row_width) // 2
        for node_id in layer:
            width, height = sizes[node_id]
            boxes[node_id] = _box(nodes[node_id], nodes, runs, links, x, y, width, height)
            x += width + GAP_X
        y += max(sizes[n][1] for n in layer) + GAP_Y
    return boxes


def _box(
    node: _Node,
    nodes: Mapping[str, _Node],
    runs: Mapping[str, NodeRun],
    links: Mapping[str, str],
    x: int,
    y: int,
    width: int,
    height: int,
) -> NodeBox:
    children: list[ChildBox] = []
    child_x = x + 12
    for label, child_width, run, child in _children(node, nodes, runs):
        children.append(
            ChildBox(
                label, child_x, y + NODE_HEIGHT, child_width, CHILD_HEIGHT, run,
                subflow=child.is_subflow, href=_link_of(child, links),
            )
        )
        child_x += child_width + 12
    kind = "subflow" if node.is_subflow else "concurrent" if children else "node"
    run = _run_of(node, runs)
    if kind == "concurrent" and not run.count:
        run = NodeRun(
            int(any(c.run.count for c in children)),
            any(c.run.failed for c in children),
            any(c.run.cancelled for c in children),
        )
    href = _link_of(node, links)
    return NodeBox(
        runtime_id=node.runtime_id,
        label=_cut(node.label),
        title=cut_line(
            f"{node.label} ({node.node_type})" if node.node_type else node.label,
            MAX_TITLE_CHARS,
        ),
        kind=kind,
        x=x,
        y=y,
        width=width,
        height=height,
        run=run,
        href=href,
        children=tuple(children),
    )


def _edge_path(tail: NodeBox, head: NodeBox, label: str | None, loop: bool) -> EdgePath:
    if tail is head:
        # A node that routes back to itself: a small loop off its right side.
        x, y = tail.x + tail.width, tail.y + tail.height // 2
        d = f"M {x} {y - 10} C {x + 44} {y - 34} {x + 44} {y + 34} {x + 6} {y + 10}"
        return EdgePath(d, label, x + 40, y, loop=True)
    if loop or head.y <= tail.y:
        # Out of the tail's right side, round the right, into the head's right side.
        x1, y1 = tail.x + tail.width, tail.y + tail.height // 2
        x2, y2 = head.x + head.width, head.y + head.height // 2
        bend = max(x1, x2) + LOOP_MARGIN - 20
        d = f"M {x1} {y1} C {bend} {y1} {bend} {y2} {x2 + 6} {y2}"
        return EdgePath(d, label, bend - 10, (y1 + y2) // 2, loop=True)
    x1, y1 = tail.center_x, tail.y + tail.height
    x2, y2 = head.center_x, head.y - 6
    middle = (y1 + y2) // 2
    d = f"M {x1} {y1} C {x1} {middle} {x2} {middle} {x2} {y2}"
    return EdgePath(d, label, (x1 + x2) // 2, middle, loop=False)

"""The pipeline's arrows point one way (docs/architecture.md): each rule read from the imports.

A module's imports are read from its source (every `import` and `from ... import`,
wherever it sits, deferred ones included), so a wrong arrow fails here before it
becomes a cycle or a studio that starts receivers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent

# Stages that do no I/O: they turn values into values.
PURE: Final = (
    "collector.decode",
    "collector.producers",
    "collector.replay",
    "collector.index",
    "collector.encode",
    "collector.model",
    "collector.durations",
    "collector.timestamps",
)
# What a pure stage may not reach: storage, the network, processes, or the running server.
IO_MODULES: Final = (
    "duckdb", "grpc", "starlette", "uvicorn", "socket", "subprocess", "sqlite3", "urllib",
    "http", "asyncio", "collector.store", "collector.receive", "collector.intake",
    "collector.jobs", "collector.cli", "collector.server", "collector.process",
    "collector.evidence", "studio",
)
# The write side: the studio reaches it only through collector.server's WriteSide.
WRITE_SIDE: Final = (
    "collector.receive", "collector.intake", "collector.jobs", "collector.cli",
    "collector.process",
)


def modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from collector.jobs import replayer` names the module too.
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def wrong_arrows(
    source: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()
) -> list[str]:
    return [
        f"{name} imports {target}"
        for name, path in modules(source.replace(".", "/"))
        for target in sorted(imports_of(path))
        if within(target, forbidden) and not within(target, allowed)
    ]


@pytest.mark.parametrize("stage", PURE)
def test_layout_pure_stages_do_no_io(stage: str) -> None:
    path = ROOT / Path(*stage.split("."))
    if path.with_suffix(".py").exists():
        found = [f"{stage} imports {t}" for t in imports_of(path.with_suffix(".py"))
                 if within(t, IO_MODULES)]
    else:
        found = wrong_arrows(stage, IO_MODULES)
    assert found == []


def test_layout_studio_never_reaches_the_write_side_but_through_the_server() -> None:
    assert wrong_arrows("studio", WRITE_SIDE) == []


def test_layout_collector_never_imports_the_studio_but_to_serve_it() -> None:
    # The command line is the edge that composes both: `statetrail serve` runs the app.
    found = [arrow for arrow in wrong_arrows("collector", ("studio",))
             if not arrow.startswith("collector.cli.main ")]
    assert found == []


def test_layout_the_store_sits_below_the_stages_that_write_it() -> None:
    assert wrong_arrows("collector.store", (*WRITE_SIDE, "collector.server")) == []


def test_layout_receivers_hand_exports_to_a_sink_not_to_the_intake() -> None:
    sink = ("collector.intake.sink",)
    assert wrong_arrows("collector.receive", ("collector.intake",), sink) == []


def test_layout_renderers_do_not_call_back_into_routes() -> None:
    assert wrong_arrows("studio.render", ("studio.views", "studio.app")) == []


def test_layout_rules_catch_a_wrong_arrow(tmp_path: Path) -> None:
    """The reader of imports finds deferred and `from package import module` forms."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from collector.jobs import replayer\n")
    assert within("collector.jobs.replayer", WRITE_SIDE)
    assert "collector.jobs.replayer" in imports_of(source)

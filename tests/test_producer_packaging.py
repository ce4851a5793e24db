"""statetrail-producer installs on its own: one runtime dependency, frameworks imported lazily."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_producer_packaging_wheel_needs_only_the_opentelemetry_api(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(tmp_path), str(ROOT / "producer")],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("statetrail_producer-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip()
                    for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    assert [r for r in requires if "extra ==" not in r] == ["opentelemetry-api>=1.27"]
    assert "statetrail_producer/py.typed" in names
    sources = {p.relative_to(ROOT / "producer" / "src").as_posix()
               for p in (ROOT / "producer" / "src").rglob("*.py")}
    assert sources <= set(names)


def test_producer_packaging_importing_the_journal_loads_no_framework() -> None:
    probe = ("import sys, statetrail_producer; "
             "print(sorted(m for m in ('langgraph', 'workflows', 'langchain_core') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "[]"

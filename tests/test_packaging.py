"""A plain (non-editable) install serves the templates and static files.

The wheel is built from the checkout and installed into a directory of its
own; the server then runs from that directory with the checkout out of reach,
so the pages can only come from what the wheel shipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
from support.servers import Server

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _pip(*args: str | Path, cwd: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--quiet", *map(str, args)],
        check=True, cwd=cwd, capture_output=True,
    )


def _source_modules() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for package in ("collector", "studio")
        for path in (ROOT / package).rglob("*.py")
    }


def test_packaging_plain_install_serves_pages_and_assets(tmp_path: Path) -> None:
    _pip("wheel", "--no-deps", "--wheel-dir", tmp_path / "dist", ROOT, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("statetrail-*.whl")
    # The test environment's editable install would quietly supply a module the wheel
    # left out (setuptools' finder serves submodules of its packages from the
    # checkout), so the server below could not notice one missing: compare the files.
    assert _source_modules() <= set(zipfile.ZipFile(wheel).namelist())
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--target", site, wheel, cwd=tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    located = subprocess.run(
        [sys.executable, "-c",
         "import studio.assets as a; print(a.TEMPLATES_DIR); print(a.STATIC_DIR);"
         "import collector.encode.rows as r; print(r.__file__)"],
        check=True, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, **env},
    ).stdout.split()
    assert [Path(p) for p in located] == [
        site / "studio" / "templates", site / "studio" / "static",
        site / "collector" / "encode" / "rows.py",
    ]
    server = Server.on_free_ports(tmp_path / "x.duckdb", env=env, cwd=tmp_path).start()
    try:
        with urllib.request.urlopen(server.url + "/", timeout=30) as page:
            assert b"statetrail" in page.read()
        with urllib.request.urlopen(server.url + "/static/app.css", timeout=30) as css:
            assert css.status == 200
    finally:
        server.stop()

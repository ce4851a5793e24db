"""Where the templates and static files are, installed or in a checkout.

They live at the top of the repository; a wheel installs them inside this
package (see pyproject.toml), so look there first.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _locate(name: str) -> Path:
    installed = _HERE / name
    return installed if installed.is_dir() else _HERE.parent / name


TEMPLATES_DIR = _locate("templates")
STATIC_DIR = _locate("static")

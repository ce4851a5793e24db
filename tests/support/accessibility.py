"""axe-core in the browser tests: what it finds wrong on the page a test has open.

axe-core is vendored in static/vendor/ (its version in the file name, its MPL-2.0 licence
beside it) and served like any static file, but no page includes it: a test adds it as a
script from the studio's own origin, which the Content-Security-Policy allows.
"""

from __future__ import annotations

from typing import Any, Final

from playwright.sync_api import Page

AXE_SCRIPT: Final = "/static/vendor/axe-core-4.14.1.min.js"
# The impacts a page must have none of; "moderate" and "minor" findings are reported only.
BLOCKING_IMPACTS: Final = ("serious", "critical")


def axe_violations(page: Page, base_url: str) -> list[dict[str, Any]]:
    """Every axe violation on the page as it is now: rule, impact, help, and the first
    few elements each, by selector."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(url=base_url + AXE_SCRIPT)
    found: list[dict[str, Any]] = page.evaluate(
        """() => axe.run(document, {resultTypes: ["violations"]}).then(result =>
             result.violations.map(v => ({
               id: v.id, impact: v.impact, help: v.help,
               nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ")),
             })))"""
    )
    return found


def blocking(violations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in violations if v["impact"] in BLOCKING_IMPACTS]

"""The documentation holds together: the README stays short and every relative link lands.

Links are read from README.md, bench/README.md and docs/*.md outside fenced code blocks; a link to a
page must name an existing file (or folder) in the repository, and a `#fragment` must
be one of the target page's headings, slugged as GitHub slugs them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 8_000
# Pages other branches of the same change write: until they land, a link to one is
# not followed; once the file exists its links and anchors are checked like any other.
PAGES_WRITTEN_ELSEWHERE: frozenset[str] = frozenset()

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines: list[str] = []
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose_lines(page):
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for line in _prose_lines(page)
        for target in _LINK.findall(line)
        if not _SCHEME.match(target)
    ]


def broken_link(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, does not resolve; None when it does."""
    path_part, _, fragment = target.partition("#")
    resolved = (page.parent / path_part).resolve() if path_part else page
    try:
        name = resolved.relative_to(ROOT).as_posix()
    except ValueError:
        return f"{target}: outside the repository"
    if not resolved.exists():
        return None if name in PAGES_WRITTEN_ELSEWHERE else f"{target}: no such file"
    if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
        return f"{target}: no heading #{fragment} in {name}"
    return None


def test_readme_is_at_most_8000_bytes() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail to docs/"


@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_docs_relative_links_resolve(page: Path) -> None:
    broken = [why for target in relative_links(page) if (why := broken_link(page, target))]
    assert not broken, "\n".join(broken)


def test_docs_link_checker_finds_a_missing_page_and_a_missing_heading() -> None:
    readme = ROOT / "README.md"

    assert broken_link(readme, "docs/no-such-page.md") is not None
    assert broken_link(readme, "docs/operations.md#no-such-heading") is not None
    assert broken_link(readme, "docs/operations.md#serve-flags") is None
    assert github_slug("`GET /api/executions/{id}/state`") == "get-apiexecutionsidstate"

"""The studio behind a reverse proxy that serves it under /statetrail and strips the prefix.

`serve --root-path /statetrail` against tests/support/proxy.py (what nginx's
`proxy_pass http://upstream/;` does): every address a page holds must stay
under the prefix and answer through the proxy, the scripts' requests included,
and the login's redirects and cookies must work there too. A root path means
the studio is published, so it always has a login (the crawl signs in with a
Bearer token). Exporters and the CLI still reach the server directly, without
the prefix.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect
from support.otlp_craft import spans_of, variant
from support.proxy import stripping_proxy
from support.servers import Server, manifest, send_scenario
from test_studio_pages import run_id_of, send

from collector.config import root_path_argument

PREFIX = "/statetrail"
PASSWORD = "proxy-pass-word"
BEARER = {"authorization": f"Bearer {PASSWORD}"}
SCENARIOS = ("a_linear", "d_subflow", "c_concurrent", "e_exception")
# A run id that every address must quote whole (telemetry chooses it).
ODD_RUN_ID = "odd/run?id=1#frag%41 x"
# Bounds the crawl: every distinct path once, then as many query variants as fit.
MAX_FETCHES = 300

pytest_plugins = ("support.browser",)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("", ""),
        ("/", ""),
        ("/statetrail", "/statetrail"),
        ("/tools/statetrail/", "/tools/statetrail"),
        (" /a.b_c~d-e ", "/a.b_c~d-e"),
    ],
)
def test_root_path_is_stored_without_a_trailing_slash(given: str, stored: str) -> None:
    assert root_path_argument(given) == stored


@pytest.mark.parametrize(
    "given", ["statetrail", "//evil.example", "/a b", "/a?b", "/a#b", "/../x", "/a/./b", "/%2e"]
)
def test_root_path_refuses_what_a_path_would_escape_or_end_at(given: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a path prefix"):
        root_path_argument(given)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--root-path", "/statetrail"], "--root-path /statetrail"),
        (["--forwarded-allow-ips", "127.0.0.1"], "--forwarded-allow-ips"),
    ],
)
def test_serve_refuses_a_published_studio_without_a_password(
    tmp_path: Path, args: list[str], reason: str
) -> None:
    # On loopback, but behind a proxy every visitor comes from loopback.
    result = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "x.duckdb"), *args],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert reason in result.stderr
    assert "--studio-password-file" in result.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_serve_refuses_a_forwarded_allow_ips_that_is_not_an_address(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "x.duckdb"),
         "--forwarded-allow-ips", "127.0.0.1,proxy.example"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "'proxy.example' is not an address or network" in result.stderr


def test_serve_refuses_a_bad_root_path_with_the_reason(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "x.duckdb"),
         "--root-path", "statetrail"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "not a path prefix" in result.stderr


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    server = Server.on_free_ports(
        tmp_path_factory.mktemp("root-path") / "statetrail.duckdb", "--root-path", PREFIX,
        env={"STATETRAIL_STUDIO_PASSWORD": PASSWORD},
    ).start()
    try:
        for scenario in SCENARIOS:
            send_scenario(server.grpc_target, scenario)
        odd = variant("odd")
        renamed = run_id_of(odd)
        for span in spans_of(odd):
            for item in span.attributes:
                if item.value.string_value == renamed:
                    item.value.string_value = ODD_RUN_ID
        send(server, odd)
        server.wait_replayed()
        with stripping_proxy(server.url, PREFIX) as proxy:
            yield server, proxy
    finally:
        server.stop()


class _Addresses(html.parser.HTMLParser):
    """Every address a page points at: links, assets, GET forms, htmx and script bases."""

    ATTRIBUTES = frozenset({"href", "src", "action", "hx-get"})

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "form" and (values.get("method") or "get").lower() != "get":
            return
        for name, value in attrs:
            if name in self.ATTRIBUTES and value and not value.startswith(("#", "data:")):
                self.found.append(value)
            elif name == "data-base" and value:
                # static/execution.js fetches the provenance panel from here.
                self.found.append(value + "/provenance?path=/")


def _addresses(page_url: str, body: str) -> list[str]:
    parser = _Addresses()
    parser.feed(body)
    return [urljoin(page_url, address).split("#", 1)[0] for address in parser.found]


@pytest.mark.slow
def test_every_address_on_every_page_stays_under_the_prefix_and_answers(
    proxied: tuple[Server, str],
) -> None:
    _, proxy = proxied
    start = f"{proxy}{PREFIX}/"
    odd = f"{proxy}{PREFIX}/executions/{quote(ODD_RUN_ID, safe='')}"
    queue, seen, escaped, failed = [start, odd], {start, odd}, [], []
    kinds: set[str] = set()
    fetched_paths: set[str] = set()
    with httpx.Client(timeout=30, headers=BEARER) as client:
        for _ in range(MAX_FETCHES):
            if not queue:
                break
            # A path not fetched yet goes first: the list alone links to more
            # filter, sort and facet variants of itself than the crawl's budget.
            fresh = [i for i, u in enumerate(queue) if urlsplit(u).path not in fetched_paths]
            url = queue.pop(fresh[0] if fresh else 0)
            fetched_paths.add(urlsplit(url).path)
            response = client.get(url)
            if response.status_code != 200:
                failed.append(f"{response.status_code} {url}")
                continue
            kinds.add(_kind(urlsplit(url).path))
            if "text/html" not in response.headers.get("content-type", ""):
                continue
            for address in _addresses(url, response.text):
                parts = urlsplit(address)
                if parts.netloc != urlsplit(proxy).netloc:
                    continue
                if not parts.path.startswith(PREFIX + "/"):
                    escaped.append(f"{address} (on {url})")
                    continue
                if address not in seen:
                    seen.add(address)
                    queue.append(address)
    assert not escaped, "addresses outside the prefix:\n" + "\n".join(escaped[:20])
    assert not failed, "addresses that did not answer through the proxy:\n" + "\n".join(failed)
    # The crawl reached every kind of page and every distinct path, so the checks
    # above covered them.
    assert {"list", "execution", "span", "provenance", "api", "static", "compare"} <= kinds
    assert all(urlsplit(url).path in fetched_paths for url in queue)


def _kind(path: str) -> str:
    route = path[len(PREFIX):]
    if route.startswith("/static/"):
        return "static"
    if route.startswith("/api/"):
        return "api"
    if route.startswith("/executions/"):
        if "/spans/" in route:
            return "span"
        return "provenance" if route.endswith("/provenance") else "execution"
    return {"/": "list", "/compare": "compare"}.get(route, route)


@pytest.mark.slow
@pytest.mark.browser
def test_browser_filters_opens_a_run_and_its_provenance_under_the_prefix(
    proxied: tuple[Server, str], page: Page
) -> None:
    _, proxy = proxied
    linear = manifest("a_linear")["outcome"]["run_id"]
    page.set_extra_http_headers(BEARER)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{proxy}{PREFIX}/")

    page.fill("#where", 'title = "finished"')
    page.press("#where", "Enter")
    expect(page).to_have_url(re.compile(rf"^{re.escape(proxy + PREFIX)}/\?.*where=title"))
    page.locator("table.executions td.workflow a").first.click()
    # The value column's link opens the run on that field's provenance, fetched by script.
    expect(page).to_have_url(re.compile(rf"{PREFIX}/executions/{linear}\?path=/title"))
    expect(page.locator("#provenance")).to_contain_text("Provenance of /title")

    page.locator("[data-step-prev]").click()  # htmx swaps the step in and records its URL
    expect(page).to_have_url(re.compile(rf"{PREFIX}/executions/{linear}\?step="))
    expect(page.locator("tr.is-selected")).to_have_count(1)
    outside = [url for url in requested if not urlsplit(url).path.startswith(PREFIX + "/")]
    assert not outside, outside


@pytest.mark.browser
def test_browser_signs_in_and_out_through_the_proxy(
    tmp_path: Path, page: Page
) -> None:
    server = _login_server(tmp_path)
    try:
        run_id = manifest("a_linear")["outcome"]["run_id"]
        with stripping_proxy(server.url, PREFIX) as proxy:
            asked = f"{proxy}{PREFIX}/executions/{run_id}?step=1"
            page.goto(asked)
            # Sent to the login under the prefix, which then sends you back where you asked.
            expect(page).to_have_url(re.compile(rf"^{re.escape(proxy + PREFIX)}/login\?next="))
            page.fill("#password", PASSWORD)
            page.click("button[type=submit]")
            expect(page).to_have_url(asked)
            expect(page.locator("h1")).to_be_visible()
            cookies = {c["name"]: c for c in page.context.cookies()}
            assert cookies["statetrail_session"]["path"] == PREFIX + "/"

            page.click("nav >> text=Sign out")  # the header's link, under the prefix
            expect(page).to_have_url(f"{proxy}{PREFIX}/logout")
            page.click("button[type=submit]")
            expect(page).to_have_url(f"{proxy}{PREFIX}/login")
            page.goto(asked)
            expect(page).to_have_url(re.compile(rf"{PREFIX}/login\?next="))
    finally:
        server.stop()


def test_exporters_and_the_cli_reach_the_server_without_the_prefix(
    proxied: tuple[Server, str],
) -> None:
    server, _ = proxied
    assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200
    listed = subprocess.run(
        [sys.executable, "-m", "collector", "executions", "--db", str(server.db), "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    run_ids = {json.loads(line)["id"] for line in listed.stdout.splitlines()}
    assert {manifest(s)["outcome"]["run_id"] for s in SCENARIOS} <= run_ids
    # OTLP/HTTP at its usual path: an empty export is a valid one.
    response = httpx.post(
        server.url + "/v1/traces", content=b"",
        headers={"content-type": "application/x-protobuf"}, timeout=30,
    )
    assert response.status_code == 200


@pytest.mark.slow
def test_a_login_server_behind_the_prefix_keeps_the_operator_and_htmx_on_track(
    tmp_path: Path,
) -> None:
    server = _login_server(tmp_path)
    try:
        # `statetrail executions` asks the running server with the sidecar's admin
        # token: it needs no studio password.
        listed = subprocess.run(
            [sys.executable, "-m", "collector", "executions", "--db", str(server.db), "--json"],
            capture_output=True, text=True, timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert manifest("a_linear")["outcome"]["run_id"] in listed.stdout
        with stripping_proxy(server.url, PREFIX) as proxy, httpx.Client(timeout=30) as client:
            # A stale tab's htmx swap, signed out: navigate to the login, don't swap it in.
            swap = client.get(f"{proxy}{PREFIX}/", headers={"hx-request": "true"})
            assert swap.status_code == 200
            assert swap.headers["hx-redirect"].startswith(f"{PREFIX}/login?next=")
        # After signing in, only the studio's own pages are where to go next.
        for asked, lands in [
            (f"{PREFIX}/compare", f"{PREFIX}/compare"),
            ("/elsewhere/", f"{PREFIX}/"),
            (f"{PREFIX}/../elsewhere", f"{PREFIX}/"),
        ]:
            with stripping_proxy(server.url, PREFIX) as proxy, httpx.Client(timeout=30) as fresh:
                form = fresh.get(f"{proxy}{PREFIX}/login").text
                token = re.search(r'name="csrf_token" value="([^"]+)"', form)
                assert token is not None
                answer = fresh.post(
                    f"{proxy}{PREFIX}/login",
                    data={"csrf_token": token.group(1), "password": PASSWORD, "next": asked},
                    headers={"origin": proxy},
                )
                assert (answer.status_code, answer.headers["location"]) == (303, lands), asked
    finally:
        server.stop()


def test_the_documented_proxy_setup_keeps_the_throttle_on_the_real_client(
    tmp_path: Path,
) -> None:
    # docs/security.md: the proxy overwrites X-Forwarded-For, serve believes only it.
    server = Server.on_free_ports(
        tmp_path / "statetrail.duckdb", "--root-path", PREFIX,
        "--forwarded-allow-ips", "127.0.0.1", "--login-failures", "3",
        env={"STATETRAIL_STUDIO_PASSWORD": PASSWORD},
    ).start()
    try:
        with stripping_proxy(server.url, PREFIX, forwarded=True) as proxy, httpx.Client(
            timeout=30
        ) as client:
            statuses = [
                client.get(
                    f"{proxy}{PREFIX}/api/executions",
                    headers={"authorization": "Bearer guess", "x-forwarded-for": f"10.0.0.{n}"},
                ).status_code
                for n in range(5)
            ]
            # The client's own header never reached serve: one address, locked after 3.
            assert statuses == [401, 401, 401, 429, 429]
    finally:
        server.stop()


def _login_server(tmp_path: Path) -> Server:
    """A server with a studio login under the prefix, holding `a_linear`, replayed."""
    server = Server.on_free_ports(
        tmp_path / "statetrail.duckdb", "--root-path", PREFIX, "--auth",
        "--studio-password", PASSWORD,
    ).start()
    send_scenario(server.grpc_target, "a_linear")
    server.wait_replayed()
    return server

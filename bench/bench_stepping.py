"""Stepping through a 250-step run in Chromium: a step's panel swapped in place against
the whole page loaded at each step.

Starts a real `statetrail serve` on a temporary database holding one verified Junjo run
of 250 transitions (tests/support/otlp_craft.py's `long_run`: a_linear's spans carrying
250 set_state events), opens its page in Debian's Chromium at step 100 and times, in the
page, from the ArrowRight keydown to the step panel showing the next step, for STEPS
presses; then, as the same-run baseline, loads the whole page at each of those steps
(navigation start to DOMContentLoaded, what a step cost before it was swapped alone).
Prints the median and slowest of each, the bytes of a step's answer and of the page,
their ratios, and PASS/FAIL for the target: median step <= 50 ms.
Run from the repository root: .venv/bin/python -m bench.bench_stepping
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Final

from playwright.sync_api import Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.otlp_craft import long_run
from support.servers import Server, export_raw

RUN_STEPS: Final = 250
FIRST_STEP: Final = 100
STEPS: Final = 30
TARGET_MS: Final = 50.0
CHROMIUM: Final = "/usr/bin/chromium"

# Installed once in the page: the keydown's time, and the time the step panel names the
# step asked for (a MutationObserver, so the figure is the page's own, not Playwright's).
WATCH: Final = """() => {
  window.benchTimes = [];
  document.addEventListener("keydown", () => { window.benchStart = performance.now(); }, true);
  new MutationObserver(() => {
    const heading = document.querySelector("#step h2");
    if (window.benchWant && heading && heading.textContent.startsWith(window.benchWant)) {
      window.benchTimes.push(performance.now() - window.benchStart);
      window.benchWant = null;
    }
  }).observe(document.body, { subtree: true, childList: true, characterData: true });
}"""


def swapped(page: Page) -> tuple[list[float], list[int]]:
    sizes: list[int] = []
    page.on("response", lambda response: sizes.append(len(response.body())))
    page.evaluate(WATCH)
    for sequence in range(FIRST_STEP + 1, FIRST_STEP + STEPS + 1):
        page.evaluate(f"() => {{ window.benchWant = 'Step {sequence} '; }}")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => window.benchWant === null", timeout=10_000)
    times: list[float] = page.evaluate("() => window.benchTimes")
    return times, sizes


def reloaded(page: Page, base: str) -> tuple[list[float], int]:
    times = []
    size = 0
    for sequence in range(FIRST_STEP + 1, FIRST_STEP + STEPS + 1):
        response = page.goto(f"{base}?step={sequence}", wait_until="domcontentloaded")
        assert response is not None
        size = len(response.body())
        times.append(page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " return n.domContentLoadedEventEnd - n.startTime; }"
        ))  # fmt: skip
    return times, size


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        server = Server.on_free_ports(Path(folder) / "bench.duckdb").start()
        try:
            export_raw(server.grpc_target, long_run("bench", RUN_STEPS).SerializeToString())
            server.wait_replayed(timeout=120)
            rows = server.get_json("/api/executions?limit=10")["executions"]
            run_id = next(row["id"] for row in rows if row["workflow"] == "Long Workflow")
            base = f"{server.url}/executions/{run_id}"
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
                )
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{base}?step={FIRST_STEP}")
                step_times, step_sizes = swapped(page)
                page_times, page_size = reloaded(page, base)
                browser.close()
        finally:
            server.stop()
    step_ms, page_ms = statistics.median(step_times), statistics.median(page_times)
    step_bytes = statistics.median(step_sizes)
    print(f"{RUN_STEPS}-step run, {STEPS} steps from step {FIRST_STEP}, Chromium")
    print(f"  step swapped in place: median {step_ms:6.1f} ms, slowest {max(step_times):6.1f} ms,"
          f" {step_bytes / 1024:6.1f} KB a step")  # fmt: skip
    print(f"  whole page per step:   median {page_ms:6.1f} ms, slowest {max(page_times):6.1f} ms,"
          f" {page_size / 1024:6.1f} KB a page")  # fmt: skip
    print(f"  ratio (swap / page):   time {step_ms / page_ms:.2f},"
          f" bytes {step_bytes / page_size:.2f}")  # fmt: skip
    verdict = "PASS" if step_ms <= TARGET_MS else "FAIL"
    print(f"  {verdict}: median step {step_ms:.1f} ms (target <= {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()

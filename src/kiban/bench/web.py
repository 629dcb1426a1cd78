"""``kiban bench web``: how fast the dashboard's jobs page comes up with many jobs in the store,
the list API behind it, and what kiban's notebook route adds to a kernel round trip.

1. a fresh ``kiban up`` (one node, one GPU) whose cluster file gives tenant ``bench`` two
   queues; a member's token;
2. the notebook route (unless ``--no-notebook``): the member starts a notebook (no GPU) and,
   once it runs, opens one kernel through ``/nb/<tenant>/<name>/`` with its kiban token and
   one directly on the notebook's Jupyter (its address and token from Jupyter's own runtime
   file), then times ``execute_request`` -> ``execute_reply`` on both, alternating, after a
   warm-up; the notebook is stopped after (its load is gone before the page is timed);
3. ``--jobs`` jobs in the store: one job holds the GPU, the rest wait behind it, submitted
   through the API by a few connections at once;
4. time to first byte of ``GET /jobs`` (to the status line and headers of the page's HTML);
5. the jobs page rendered in headless Chromium (Playwright, Debian's ``chromium``), signed in
   with the admin's session cookie: from navigation start (``performance.timeOrigin``) to the
   first ``job-row`` in the DOM, as the page itself records it, in a new browser context
   (nothing cached) for each load;
6. the list API behind the page: ``GET /api/v1/jobs?limit=50&offset=K`` with K spread over
   the whole list, one after another on one keep-alive connection.

Goals: the page rendered in well under a second (p50 < 1 s, the issue's words); the route adds
at most 1 ms p50 to a kernel round trip (as the serving router's goal).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.table import Table

from kiban.bench.api_burst import job_document
from kiban.bench.kernel import KernelClient, KernelError
from kiban.bench.loadgen import BenchError, HttpConnection, as_ms, prepare_request
from kiban.bench.machine import describe_machine, machine_line
from kiban.bench.servers import KibanServer, bench_workspace
from kiban.stats import percentile

TENANT = "bench"
NOTEBOOK_QUEUE = "bench"
HELD_QUEUE = "bench-held"
NOTEBOOK = "bench"
SUBMITTERS = 8  # connections that submit the jobs at once (under the per-caller limit of 16)
KERNEL_WARMUP = 10
PAGE_SIZE = 50
GOAL_RENDER_P50_MS = 1000.0
GOAL_ROUTE_ADDED_P50_MS = 1.0

CLUSTER_FILE = f"""\
queues:
  - name: default
    tenant: default
  - name: {NOTEBOOK_QUEUE}
    tenant: {TENANT}
  - name: {HELD_QUEUE}
    tenant: {TENANT}
"""

# Records, in the page, when the first job row is put in the DOM (ms since navigation start).
FIRST_ROW_SCRIPT = """
new MutationObserver((_, observer) => {
  if (document.querySelector('[data-testid="job-row"]')) {
    window.__kibanFirstRow = performance.now();
    observer.disconnect();
  }
}).observe(document, {subtree: true, childList: true});
"""

# The first row's time and DOMContentLoaded's end, both in ms since navigation start.
NAVIGATION_TIMINGS = """() => ({
  firstRow: window.__kibanFirstRow,
  domContentLoaded: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd,
})"""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class WebBenchOptions:
    jobs: int = 10_000
    loads: int = 7
    list_samples: int = 200
    ttfb_samples: int = 50
    kernel_samples: int = 100
    notebook: bool = True
    startup_timeout_s: float = 60.0
    notebook_timeout_s: float = 240.0

    def __post_init__(self) -> None:
        if self.jobs < PAGE_SIZE:
            raise ValueError(f"jobs must be at least {PAGE_SIZE} (one page of the list)")
        for name in ("loads", "list_samples", "ttfb_samples", "kernel_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1")


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    """p50, p99 and the count of a list of timings, in milliseconds."""
    return {
        "p50_ms": as_ms(percentile(seconds, 50)),
        "p99_ms": as_ms(percentile(seconds, 99)),
        "samples": len(seconds),
    }


# -- the store -------------------------------------------------------------------------------
async def _call(
    conn: HttpConnection,
    url: str,
    method: str,
    path: str,
    token: str,
    body: dict[str, Any] | None = None,
) -> Any:
    status, answer = await conn.send(prepare_request(method, url, path, token, body))
    if status >= 300:
        raise BenchError(f"{method} {path} answered {status}: {answer[:300]!r}")
    return json.loads(answer) if answer else None


async def _fill(url: str, admin: str, jobs: int) -> float:
    """One job holding the GPU, then ``jobs - 1`` waiting behind it, by ``SUBMITTERS``
    connections at once; returns the seconds the submissions took."""
    conn = await HttpConnection.open(url)
    try:
        holder = job_document("bench-holder", HELD_QUEUE, ["sleep", "3600"], gpu=1)
        await _call(conn, url, "POST", "/api/v1/jobs", admin, holder)
    finally:
        await conn.close()
    waiting = job_document("bench-waiting", HELD_QUEUE, ["true"], gpu=1)
    left = jobs - 1
    shares = [left // SUBMITTERS + (1 if i < left % SUBMITTERS else 0) for i in range(SUBMITTERS)]

    async def submitter(count: int) -> None:
        conn = await HttpConnection.open(url)
        try:
            for _ in range(count):
                await _call(conn, url, "POST", "/api/v1/jobs", admin, waiting)
        finally:
            await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(submitter(n) for n in shares if n))
    return time.perf_counter() - started


async def _time_list(url: str, token: str, jobs: int, samples: int) -> tuple[list[float], int]:
    """``samples`` list pages at offsets spread over the list; the seconds each took, and the
    rows of the first page."""
    conn = await HttpConnection.open(url)
    seconds: list[float] = []
    try:
        page_rows = -1
        for i in range(samples):
            offset = (i * 7919 * PAGE_SIZE) % max(jobs - PAGE_SIZE, 1)
            path = f"/api/v1/jobs?limit={PAGE_SIZE}&offset={offset}"
            started = time.perf_counter()
            status, answer = await conn.send(prepare_request("GET", url, path, token))
            seconds.append(time.perf_counter() - started)
            if status != 200:
                raise BenchError(f"GET {path} answered {status}: {answer[:300]!r}")
            if page_rows < 0:
                page_rows = len(json.loads(answer))
        return seconds, page_rows
    finally:
        await conn.close()


def _total_count(url: str, token: str) -> int:
    answer = httpx.get(
        f"{url}/api/v1/jobs",
        params={"limit": 1},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    header = answer.headers.get("x-total-count")
    if answer.status_code != 200 or header is None:
        raise BenchError(
            f"GET /api/v1/jobs answered {answer.status_code} without X-Total-Count: "
            f"{answer.text[:200]}"
        )
    return int(header)


# -- the page --------------------------------------------------------------------------------
def _time_first_byte(url: str, samples: int) -> list[float]:
    seconds: list[float] = []
    with httpx.Client(timeout=30) as client:
        for _ in range(samples):
            started = time.perf_counter()
            with client.stream("GET", f"{url}/jobs") as answer:
                seconds.append(time.perf_counter() - started)
                if answer.status_code != 200:
                    raise BenchError(
                        f"GET /jobs answered {answer.status_code}: is the dashboard built "
                        "(make setup)?"
                    )
                answer.read()
    return seconds


def _time_page(url: str, token: str, loads: int) -> tuple[list[float], list[float], str]:
    """The jobs page in headless Chromium ``loads`` times, each in a new context; the seconds
    from navigation start to its first job row, those to DOMContentLoaded (the HTML and the
    bundle parsed, before any API answer), and the browser's version."""
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise BenchError("kiban bench web needs Playwright (pip install -e '.[dev]')") from None
    executable = shutil.which("chromium")
    if executable is None:
        raise BenchError("kiban bench web needs chromium (bash scripts/ensure-chromium.sh)")
    seconds: list[float] = []
    loaded: list[float] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable)
            try:
                for _ in range(loads):
                    context = browser.new_context(base_url=url)
                    try:
                        signed = context.request.post("/web/session", data={"token": token})
                        if not signed.ok:
                            raise BenchError(
                                f"POST /web/session answered {signed.status}: {signed.text()}"
                            )
                        page = context.new_page()
                        page.add_init_script(FIRST_ROW_SCRIPT)
                        page.goto("/jobs")
                        page.wait_for_function("window.__kibanFirstRow !== undefined")
                        timings = page.evaluate(NAVIGATION_TIMINGS)
                        seconds.append(float(timings["firstRow"]) / 1000)
                        loaded.append(float(timings["domContentLoaded"]) / 1000)
                    finally:
                        context.close()
                version = browser.version
            finally:
                browser.close()
    except PlaywrightError as exc:
        raise BenchError(f"chromium: {exc}") from None
    return seconds, loaded, version


# -- the notebook route ----------------------------------------------------------------------
def _jupyter_of(job_id: str) -> tuple[str, str]:
    """The URL and token of the Jupyter server a notebook's job runs, from the runtime file
    (``jpserver-<pid>.json``) Jupyter writes where its environment says."""
    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("KIBAN_JOB_ID") != job_id:
            continue
        folders = [env.get("JUPYTER_RUNTIME_DIR")]
        data = (
            env.get("JUPYTER_DATA_DIR")
            or (env.get("XDG_DATA_HOME") or (env.get("HOME", "") + "/.local/share")) + "/jupyter"
        )
        folders.append(f"{data}/runtime")
        for folder in filter(None, folders):
            found = Path(folder) / f"jpserver-{proc.pid}.json"
            try:
                info = json.loads(found.read_text())
            except (OSError, ValueError):
                continue
            return str(info["url"]), str(info.get("token", ""))
    raise BenchError(f"found no Jupyter runtime file of notebook job {job_id}")


def _notebook(url: str, member: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {member}"}
    if body is None:
        answer = httpx.get(f"{url}/api/v1/notebooks/{NOTEBOOK}", headers=headers, timeout=60)
    else:
        answer = httpx.post(f"{url}/api/v1/notebooks", json=body, headers=headers, timeout=60)
    if answer.status_code not in (200, 201):
        raise BenchError(f"notebooks API answered {answer.status_code}: {answer.text[:300]}")
    found: dict[str, Any] = answer.json()
    return found


def _time_kernels(url: str, member: str, options: WebBenchOptions, say: Progress) -> dict[str, Any]:
    say("a notebook of the member's, started through the API")
    body = {"name": NOTEBOOK, "gpus": 0, "queue": NOTEBOOK_QUEUE, "idleTimeout": "1h"}
    notebook = _notebook(url, member, body)
    give_up = time.monotonic() + options.notebook_timeout_s
    while notebook["state"] != "Running":
        if notebook["state"] in ("Stopped", "Failed") or time.monotonic() > give_up:
            raise BenchError(
                f"notebook {NOTEBOOK} is {notebook['state']} ({notebook.get('reason')}) after "
                f"{options.notebook_timeout_s:g} s"
            )
        time.sleep(0.2)
        notebook = _notebook(url, member)
    try:
        jupyter, jupyter_token = _jupyter_of(str(notebook["jobId"]))
        routed = KernelClient(f"{url}{notebook['url']}", {"Authorization": f"Bearer {member}"})
        direct = KernelClient(jupyter, {"Authorization": f"token {jupyter_token}"})
        say(f"kernel round trips: {options.kernel_samples} through the route, as many direct")
        try:
            with routed, direct:
                for _ in range(KERNEL_WARMUP):
                    routed.execute("0")
                    direct.execute("0")
                through: list[float] = []
                around: list[float] = []
                for _ in range(options.kernel_samples):
                    through.append(routed.execute("0").seconds)
                    around.append(direct.execute("0").seconds)
        except KernelError as exc:
            raise BenchError(f"kernel: {exc}") from None
    finally:
        httpx.post(
            f"{url}/api/v1/notebooks/{NOTEBOOK}/stop",
            headers={"Authorization": f"Bearer {member}"},
            timeout=60,
        )
    route, plain = summary_ms(through), summary_ms(around)
    return {
        "route": route,
        "direct": plain,
        "added_p50_ms": round(route["p50_ms"] - plain["p50_ms"], 2),
        "added_p99_ms": round(route["p99_ms"] - plain["p99_ms"], 2),
        "ratio_p50": round(route["p50_ms"] / plain["p50_ms"], 3) if plain["p50_ms"] else None,
    }


# -- the whole benchmark ---------------------------------------------------------------------
def run_web_bench(options: WebBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Run the benchmark on a fresh server and return the JSON-ready report."""
    progress: Progress = say or (lambda _: None)
    machine = describe_machine()
    report: dict[str, Any] = {"jobs": options.jobs}
    with (
        bench_workspace("kiban-bench-web-") as root,
        KibanServer(root / "home", None, options.startup_timeout_s, CLUSTER_FILE) as server,
    ):
        try:
            answer = httpx.post(
                f"{server.url}/api/v1/tenants/{TENANT}/tokens",
                json={"name": "member"},
                headers={"Authorization": f"Bearer {server.token}"},
                timeout=60,
            )
            if answer.status_code >= 300:
                raise BenchError(f"a member's token: {answer.status_code} {answer.text[:200]}")
            member = str(answer.json()["token"])
            report["kernel"] = (
                _time_kernels(server.url, member, options, progress) if options.notebook else None
            )
            progress(f"{options.jobs:,} jobs into the store through the API")
            report["fill_s"] = round(asyncio.run(_fill(server.url, server.token, options.jobs)), 1)
            report["listed_total"] = _total_count(server.url, server.token)
            progress(f"time to first byte of /jobs, {options.ttfb_samples} times")
            report["ttfb"] = summary_ms(_time_first_byte(server.url, options.ttfb_samples))
            progress(f"the jobs page in headless chromium, {options.loads} loads")
            rendered, loaded, version = _time_page(server.url, server.token, options.loads)
            report["render"] = summary_ms(rendered)
            report["dom_content_loaded"] = summary_ms(loaded)
            report["browser"] = f"Chromium {version}"
            progress(f"the list API, {options.list_samples} pages of {PAGE_SIZE}")
            listed, page_rows = asyncio.run(
                _time_list(server.url, server.token, options.jobs, options.list_samples)
            )
            report["list_api"] = {**summary_ms(listed), "page_rows": page_rows}
        except BenchError as exc:
            raise BenchError(f"{exc}; the server's log ends:\n{server.log}") from exc
    kernel = report["kernel"]
    report["goals"] = {
        "render_p50_ms": GOAL_RENDER_P50_MS,
        "route_added_p50_ms": GOAL_ROUTE_ADDED_P50_MS,
    }
    report["goals_met"] = {
        "render_p50_ms": report["render"]["p50_ms"] < GOAL_RENDER_P50_MS,
        "route_added_p50_ms": None
        if kernel is None
        else kernel["added_p50_ms"] <= GOAL_ROUTE_ADDED_P50_MS,
    }
    report["settings"] = {
        "loads": options.loads,
        "list_samples": options.list_samples,
        "ttfb_samples": options.ttfb_samples,
        "kernel_samples": options.kernel_samples,
        "page_size": PAGE_SIZE,
    }
    if hasattr(os, "getloadavg"):
        machine["load_average_after"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    return report


def web_table(report: dict[str, Any]) -> Table:
    """The report as a table, against the goals."""
    table = Table(
        title="kiban bench web",
        title_justify="left",
        header_style="bold",
        caption=machine_line(report["machine"]),
        caption_justify="left",
    )
    table.add_column("measure")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    met = report["goals_met"]

    def mark(ok: bool | None) -> str:
        return "" if ok is None else (" [green]✓[/green]" if ok else " [red]✗[/red]")

    def ms(value: float) -> str:
        return f"{value:,.1f} ms"

    jobs = f"{report['listed_total']:,} jobs listed"
    ttfb, render, listed = report["ttfb"], report["render"], report["list_api"]
    table.add_row(
        "GET /jobs, first byte",
        ms(ttfb["p50_ms"]),
        ms(ttfb["p99_ms"]),
        "",
        f"the page's HTML: status line and headers, {ttfb['samples']} requests",
    )
    table.add_row(
        "jobs page rendered",
        ms(render["p50_ms"]),
        ms(render["p99_ms"]),
        f"< {GOAL_RENDER_P50_MS:,.0f} ms" + mark(met["render_p50_ms"]),
        f"{report.get('browser', 'Chromium')} headless, navigation start to the first job row;"
        f" {render['samples']} loads, nothing cached; {jobs}",
    )
    loaded = report["dom_content_loaded"]
    table.add_row(
        "  of which DOMContentLoaded",
        ms(loaded["p50_ms"]),
        ms(loaded["p99_ms"]),
        "",
        "the HTML and the script bundle loaded and parsed, before any API answer",
    )
    table.add_row(
        f"GET /api/v1/jobs?limit={report['settings']['page_size']}",
        ms(listed["p50_ms"]),
        ms(listed["p99_ms"]),
        "",
        f"{listed['samples']} pages at offsets across the list, one connection",
    )
    kernel = report["kernel"]
    if kernel is None:
        table.add_row("kernel round trip", "-", "-", "", "not measured (--no-notebook)")
    else:
        route, direct = kernel["route"], kernel["direct"]
        table.add_row(
            "kernel round trip, direct",
            ms(direct["p50_ms"]),
            ms(direct["p99_ms"]),
            "",
            f"execute_request to execute_reply on Jupyter's own port; {direct['samples']}",
        )
        table.add_row(
            "kernel round trip, kiban route",
            ms(route["p50_ms"]),
            ms(route["p99_ms"]),
            "",
            "the same through /nb/<tenant>/<name>/ with a kiban token",
        )
        table.add_row(
            "added by the route",
            ms(kernel["added_p50_ms"]),
            ms(kernel["added_p99_ms"]),
            f"<= {GOAL_ROUTE_ADDED_P50_MS:g} ms" + mark(met["route_added_p50_ms"]),
            f"ratio p50 {kernel['ratio_p50']}",
        )
    return table

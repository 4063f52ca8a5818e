"""The web console of ``flowpipe serve`` in headless Chromium, for real: a click starts a graph, a form adds a
camera, its row shows frames moving, its picture arrives and it plays live (fragmented MP4), a click removes it
and another stops the graph.
A screenshot is kept in tests/artifacts/console.png."""
from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).parent / "artifacts"


def _serve(instances: object) -> tuple[Callable[[], None], int]:
    """``flowpipe serve``'s app over ``instances`` on a free loopback port, in a thread: how to stop it, its
    port."""
    import uvicorn
    from test_sources_sinks import _free_port

    from flowpipe.serve.api import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(instances), host="127.0.0.1", port=port,  # type: ignore[arg-type]
                                           log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.05)

    def stop() -> None:
        server.should_exit = True
        t.join(10)

    return stop, port


@contextmanager
def _console(instances: Any, template: str, height: int) -> Iterator[tuple[Any, str]]:
    """The console over ``instances`` in headless Chromium, an instance of ``template`` started with a click:
    the page and the instance's id. The browser, the server and every instance stop after."""
    stop, port = _serve(instances)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": height})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_selector(f"#template option[value={template}]", state="attached")
                page.click("#start")
                row = page.wait_for_selector("#instances tbody tr[data-id]")
                yield page, str(row.get_attribute("data-id"))  # type: ignore[union-attr]
            finally:
                browser.close()
    finally:
        stop()
        for inst in list(instances.instances.values()):
            instances.stop(inst)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_console_starts_a_graph_adds_and_removes_a_camera(tmp_path) -> None:
    from test_serve import TEMPLATE

    from flowpipe.sample import sample_path
    from flowpipe.serve.instances import Instances

    graphs, media = tmp_path / "graphs", tmp_path / "media"
    graphs.mkdir()
    media.mkdir()
    (graphs / "cams.yaml").write_text(TEMPLATE)
    (media / "clip.mp4").symlink_to(sample_path("sample"))
    instances = Instances([graphs], tmp_path / "out", media)
    with _console(instances, "cams", 800) as (page, iid):
        assert iid in instances.instances
        page.fill("#stream-id", "door")
        page.fill("#stream-uri", "clip.mp4")
        page.click("#add")
        page.wait_for_selector("#streams tbody tr[data-stream=door]")
        # frames move: the row's 'out' cell grows between two refreshes of the page
        out = "#streams tbody tr[data-stream=door] td:nth-child(5)"
        page.wait_for_function(f"Number(document.querySelector('{out}').textContent) > 10")
        first = int(page.text_content(out) or 0)
        page.wait_for_function(f"Number(document.querySelector('{out}').textContent) > {first}")
        page.wait_for_function("document.querySelector('#streams tbody tr[data-stream=door] td:nth-child(3)')"
                               ".textContent > 0")
        page.click("#streams tbody tr[data-stream=door]")
        page.wait_for_function("document.getElementById('preview').dataset.stream === 'door' && "
                               "document.getElementById('preview').naturalWidth > 0")
        # and it plays live: H.264 in fragmented MP4 through Media Source Extensions, its clock moving
        page.wait_for_function("(() => { const v = document.getElementById('live'); return !v.hidden && "
                               "v.dataset.stream === 'door' && v.videoWidth === 640 && v.currentTime > 1.0; })()",
                               timeout=20_000)
        played = page.evaluate("document.getElementById('live').currentTime")
        page.wait_for_function(f"document.getElementById('live').currentTime > {played} + 0.5")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)
        page.click("#streams tbody tr[data-stream=door] button")
        page.wait_for_selector("#streams tbody tr[data-stream=door]", state="detached")
        assert "door" not in instances.get(iid).runner.live.added
        page.fill("#stream-id", "bad")
        page.fill("#stream-uri", "ftp://camera/1")
        page.click("#add")
        page.wait_for_function("document.getElementById('message').textContent.includes('URI scheme not served')")
        page.click(f"#instances tbody tr[data-id='{iid}'] button")
        page.wait_for_selector(f"#instances tbody tr[data-id='{iid}']", state="detached")
        assert iid not in instances.instances
        assert (ARTIFACTS / "console.png").stat().st_size > 10_000


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_console_lists_events_with_their_snapshot_and_plays_their_clip(tmp_path) -> None:
    """A graph whose analytics raise an event a lap (tests/test_serve.py's COUNTING): the console's events table
    fills with them, each with its snapshot, and a click plays the event's clip."""
    from test_serve import COUNTING

    from flowpipe.serve.instances import Instances

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "counting.yaml").write_text(COUNTING)
    instances = Instances([graphs], tmp_path / "out")
    with _console(instances, "counting", 900) as (page, _iid):
        page.wait_for_function("[...document.querySelectorAll('#events tbody img')].some(i => i.naturalWidth > 0)"
                               " && document.querySelectorAll('#events tbody button').length >= 2",
                               timeout=30_000)
        assert page.text_content("#events tbody tr td:nth-child(3)") == "crossed"
        page.locator("#events tbody button").first.click()
        page.wait_for_function("(() => { const v = document.getElementById('clip'); return !v.hidden && "
                               "v.readyState >= 2 && v.videoWidth > 0; })()", timeout=20_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console_events.png"), full_page=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_console_moves_a_running_instance_s_line_by_drawing_it_over_the_picture(tmp_path) -> None:
    """A graph counting a crossing a lap at the picture's left edge: its gate drawn again with two clicks on
    the right of the picture, while it runs. The instance takes it (its parameters say so, in fractions of the
    picture where the clicks were), and no crossing is counted after; a parameter that cannot change is shown
    with no field to edit."""
    from test_serve import RETUNE

    from flowpipe.serve.instances import Instances

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "gate.yaml").write_text(RETUNE.replace("units: pixels, ", "").replace(
        "gate: [[25, 0], [25, 200]]", "gate: [[0.018, 0.0], [0.018, 1.0]]\n  zone: [[0, 0], [0.5, 0], [0.5, 0.5]]")
        .replace("rules: [", 'zones: {z: {polygon: "${params.zone}"}}, rules: ['))  # 25 px of the sample's 1366
    instances = Instances([graphs], tmp_path / "out")
    with _console(instances, "gate", 1000) as (page, iid):
        live = instances.get(iid).runner.live
        _until(lambda: len(live.events()) >= 2, "no crossing before the move")
        page.wait_for_selector("#parameters tbody tr[data-param=gate] button:text('Draw')")
        assert page.locator("#parameters tbody tr[data-param=metadata] input").count() == 0
        page.wait_for_function("document.getElementById('preview').naturalWidth > 0 || "
                               "document.getElementById('live').videoWidth > 0", timeout=20_000)
        page.click("#parameters tbody tr[data-param=gate] button:text('Draw')")
        # where the picture is, read from the page's own elements: the live video where it plays, else the JPEG
        x, y, w, h = page.evaluate("""(() => { const v = document.getElementById('live');
            const el = !v.hidden && v.videoWidth ? v : document.getElementById('preview');
            const r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()""")
        page.mouse.click(x + 0.9 * w, y + 0.1 * h)
        page.mouse.click(x + 0.9 * w, y + 0.9 * h)
        _until(lambda: instances.get(iid).parameters["gate"] != [[0.018, 0.0], [0.018, 1.0]], "the line was not taken")
        moved = time.time()
        (a, b) = instances.get(iid).parameters["gate"]
        assert a == pytest.approx([0.9, 0.1], abs=0.01) and b == pytest.approx([0.9, 0.9], abs=0.01)
        page.wait_for_function("Math.abs(JSON.parse(document.querySelector("
                               "'#parameters tbody tr[data-param=gate] input').value)[0][0] - 0.9) < 0.01",
                               timeout=10_000)  # the table shows the value the instance took
        time.sleep(2.5)  # over three laps
        assert [e for e in live.events() if e["at"] > moved + 0.5] == []
        # a zone: three corners clicked, the fourth double-clicked (its two clicks are one corner)
        page.click("#parameters tbody tr[data-param=zone] button:text('Draw')")
        corners = [(0.1, 0.1), (0.6, 0.1), (0.6, 0.7)]
        for cx, cy in corners:
            page.mouse.click(x + cx * w, y + cy * h)
        page.mouse.dblclick(x + 0.1 * w, y + 0.7 * h)
        _until(lambda: len(instances.get(iid).parameters["zone"]) == 4, "the zone was not taken")
        zone = instances.get(iid).parameters["zone"]
        for got, want in zip(zone, [*corners, (0.1, 0.7)]):
            assert got == pytest.approx(list(want), abs=0.01)
        # the watched camera's own zone: drawn with "own" ticked, that camera's alone
        page.check("#own")
        page.click("#parameters tbody tr[data-param=zone] button:text('Draw')")
        for cx, cy in [(0.2, 0.2), (0.4, 0.2), (0.4, 0.4)]:
            page.mouse.click(x + cx * w, y + cy * h)
        page.mouse.dblclick(x + 0.2 * w, y + 0.4 * h)
        inst = instances.get(iid)
        _until(lambda: bool(inst.own), "the camera's own zone was not taken")
        ((stream, own),) = inst.own.items()
        assert stream == live.states()[0]["stream"] and len(own["zone"]) == 4 and own["zone"][1] == pytest.approx(
            [0.4, 0.2], abs=0.01)
        assert inst.parameters["zone"] == zone  # every other camera's as it was
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console_parameters.png"), full_page=True)


def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)

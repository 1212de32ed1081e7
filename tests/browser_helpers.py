"""What the browser tests share: where their screenshots go, the skip where Chromium is missing, and
an executed lesson opened in JupyterLab, its outputs measured against their output areas.

An executed lesson (papermill's copy, outputs and widget state saved) is opened in JupyterLab as a
learner who ran it sees it: JupyterLab draws the saved outputs (bokeh figures through jupyter_bokeh,
widgets from the saved widget state) without running a cell. The copy is signed (trusted), as a
notebook a learner ran is, so that BokehJS runs; the notebook's windowing is off, so that every
cell is in the page to be measured and photographed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from workbench.teach.site import CHROMIUM  # Debian's Chromium

ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "artifacts" / "browser"
BOKEH_EXEC = "application/vnd.bokehjs_exec.v0+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDTH_SLACK = 1  # pixels: sub-pixel rounding

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Chromium at {CHROMIUM}: 'apt-get install chromium' (.ci/run does it) enables the browser test",
)


@contextlib.contextmanager
def jupyter_lab_serving(root: Path, scratch: Path) -> Iterator[tuple[str, str, Path]]:
    """JupyterLab (as ``make lab`` starts it) serving ``root``, with fresh user settings under ``scratch``
    (windowing off) and its own data directory (where notebooks are signed: :func:`add_trusted`);
    yields (url, token, data directory)."""
    from workbench import doctor

    data = scratch / "data"
    tracker = scratch / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    data.mkdir(parents=True, exist_ok=True)
    env = {
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTERLAB_SETTINGS_DIR": str(scratch / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
    }
    with doctor.jupyter_lab(env=env, root=root) as (url, token):
        yield url, token, data


@contextlib.contextmanager
def lesson_lab(notebook: str, scratch: Path, env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """JupyterLab serving a temporary copy of ``notebook`` (a lesson's file name), at size "ci", started as
    ``make lab`` starts it (``workbench.doctor.jupyter_lab``: the project's settings first), with ``env`` on
    top and fresh user settings under ``scratch`` (no answer a person gave in their own JupyterLab
    applies); yields (url, token) and stops the server after."""
    import shutil

    from workbench import doctor

    root = scratch / "lab"
    root.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "notebooks" / notebook, root / notebook)
    env = {
        **(env or {}),
        "WORKBENCH_SIZE": "ci",
        "JUPYTERLAB_SETTINGS_DIR": str(scratch / "user-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
    }
    with doctor.jupyter_lab(env=env, root=root) as (url, token):
        yield url, token


def add_trusted(executed: Path, root: Path, data: Path, name: str | None = None) -> tuple[str, dict[str, int]]:
    """Copy an executed notebook into the server's ``root`` (as ``name``), signed as trusted in the
    server's ``data`` directory; returns its name and how many bokeh figures and widget views its
    outputs hold (what the browser must draw)."""
    from nbformat.sign import NotebookNotary

    notebook = nbformat.read(executed, as_version=4)
    NotebookNotary(data_dir=str(data)).sign(notebook)
    name = name or executed.name
    nbformat.write(notebook, root / name)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    counts = {
        "bokeh": sum(BOKEH_EXEC in o.get("data", {}) for o in outputs),
        "widgets": sum(WIDGET_VIEW in o.get("data", {}) for o in outputs),
    }
    return name, counts


# Every output area of the notebook: its width, and the widest thing drawn in it (bokeh canvases and
# their roots, tables, widgets; looked for inside shadow roots too, where bokeh draws).
# Every output area of the notebook: its width, and the right edges of the widest table and of the
# widest other thing drawn in it (bokeh roots and canvases, widgets), looked for inside shadow roots
# too (bokeh draws there), in pixels from the area's left edge.
_MEASURE = """() => {
  const deep = (root, out) => {
    for (const e of root.querySelectorAll('*')) {
      if (e.matches('canvas, table, .jupyter-widgets, .widget-hbox, .widget-vbox, [data-root-id]')) out.push(e);
      if (e.shadowRoot) deep(e.shadowRoot, out);
    }
    return out;
  };
  const name = e => e.tagName.toLowerCase() + (typeof e.className === 'string' && e.className ?
    '.' + e.className.split(' ')[0] : '');
  const found = [];
  document.querySelectorAll('.jp-Notebook .jp-Cell').forEach((cell, index) => {
    const line = cell.querySelector('.jp-InputArea-editor .cm-line');
    const source = line ? line.textContent.slice(0, 100) : '';
    cell.querySelectorAll('.jp-OutputArea-output').forEach(area => {
      const box = area.getBoundingClientRect();
      if (box.width === 0) return;
      const widest = {table: [0, ''], figure: [0, '']};
      for (const e of deep(area, [])) {
        const r = e.getBoundingClientRect(), kind = e.tagName === 'TABLE' ? 'table' : 'figure';
        if (r.width > 0 && r.right - box.left > widest[kind][0]) widest[kind] = [r.right - box.left, name(e)];
      }
      found.push({cell: index, source, area: area.clientWidth, scroll: area.scrollWidth,
                  table: Math.round(widest.table[0]), figure: Math.round(widest.figure[0]),
                  what: widest.figure[1] || widest.table[1]});
    });
  });
  return {outputs: found, canvases: deep(document, []).filter(e => e.tagName === 'CANVAS' && e.width > 0).length};
}"""


def measure(page) -> dict:
    """Every output area's width (``area``), its content's (``scroll``), the right edges of its widest
    table and widest figure or widget (``table``, ``figure``, pixels from its left edge); and how many
    canvases are drawn."""
    return page.evaluate(_MEASURE)


def too_wide(measured: dict, tables: bool = True) -> list[str]:
    """The outputs wider than their output area (``tables=False``: tables may be, figures and widgets
    not), as lines that say which cell and what."""
    lines = []
    for o in measured["outputs"]:
        widths = {"figure or widget": o["figure"]}
        if tables:
            widths |= {"table": o["table"], "content": o["scroll"]}
        for what, width in widths.items():
            if width > o["area"] + WIDTH_SLACK:
                shown = f"{what} ({o['what']})" if what == "figure or widget" else what
                lines.append(f"cell {o['cell']} ({o['source']!r}): {shown} is {width} px in a {o['area']} px output")
                break
    return lines


_DRAWN = """() => {
  const deep = (root) => { for (const e of root.querySelectorAll('*')) { if (e.tagName === 'CANVAS') return true;
    if (e.shadowRoot && deep(e.shadowRoot)) return true; } return false; };
  const roots = [...document.querySelectorAll('.jp-OutputArea-output [data-root-id]')];
  const areas = [...document.querySelectorAll('.jp-OutputArea-output')];
  return {bokeh: roots.filter(deep).length,
          widgets: document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets').length,
          size: areas.map(a => a.scrollWidth + 'x' + a.scrollHeight).join(',')};
}"""


def _menu(page, menu: str, item: str) -> None:
    """Click ``item`` in JupyterLab's ``menu`` (menus stay put while open: no race with a toast)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def _api(url: str, token: str, path: str, body: dict | None = None) -> dict:
    """POST ``body`` to the Jupyter server's REST API at ``path``; its JSON answer."""
    request = urllib.request.Request(
        f"{url}/api/{path}?token={token}",
        data=json.dumps(body or {}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def start_kernel(url: str, token: str, name: str = "python3") -> str:
    """Start a kernel of kernelspec ``name`` on the server (it runs no code); its id, for ``open_executed``."""
    return _api(url, token, "kernels", {"name": name})["id"]


def open_executed(
    page, url: str, token: str, name: str, counts: dict[str, int], timeout: float = 300, kernel: str | None = None
) -> None:
    """Open an executed notebook in JupyterLab (loaded once per page: later notebooks are opened from
    the File menu, the one before closed) and wait until every bokeh figure of its outputs is drawn,
    every saved widget view too, and the outputs' sizes have settled (alike twice in a row, half a
    second apart: bokeh lays figures out again as their outputs get their widths).

    ``kernel``: the id of a running kernel (:func:`start_kernel`) the notebook joins: a session of the
    notebook's path made with it first, which JupyterLab connects to as to any session of the path,
    so no kernel starts per notebook. Widget views are drawn once the notebook's kernel is ready (the
    widget manager asks it for its widgets, then draws the saved ones): a kernel that runs no code has
    none, whether new or shared. None: JupyterLab starts the notebook's own kernel."""
    if kernel is not None:
        _api(url, token, "sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"id": kernel}})
    if "/lab" not in page.url:
        page.goto(f"{url}/lab?reset&token={token}")  # reset: no notebook of an earlier run reopened
        page.wait_for_selector(".jp-LabShell .lm-MenuBar", timeout=90_000)
    elif page.locator(".jp-NotebookPanel").count():
        _menu(page, "File", "Close All Tabs")
        closing = page.locator(".jp-Dialog")  # a notebook JupyterLab thinks changed: nothing to keep
        if closing.count():
            closing.get_by_role("button", name="Discard").click()
        page.wait_for_selector(".jp-NotebookPanel", state="detached")
    _menu(page, "File", "Open from Path")
    page.locator(".jp-Dialog input").fill(name)
    page.locator(".jp-Dialog").get_by_role("button", name="Open", exact=True).click()
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-CodeCell", timeout=90_000)
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        dialog = page.locator(".jp-Dialog")
        if dialog.count():  # "Select Kernel" when the kernels were not listed yet: keep the one proposed
            text = dialog.first.inner_text()
            if "Select Kernel" not in text:
                pytest.fail(f"JupyterLab opened a dialog on {name}: {text[:500]}")
            dialog.get_by_role("button", name="Select", exact=True).click()
        now = page.evaluate(_DRAWN)
        if now["bokeh"] >= counts["bokeh"] and now["widgets"] >= counts["widgets"] and now == previous:
            return
        if time.monotonic() > deadline:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{name.removesuffix('.ipynb')}-not-drawn.png"))
            pytest.fail(
                f"{name}: after {timeout:.0f} s, {now['bokeh']} of {counts['bokeh']} bokeh figures drawn, "
                f"{now['widgets']} widget views ({counts['widgets']} saved)"
            )
        previous = now
        page.wait_for_timeout(500)  # the next look


def shut_down_kernels(url: str, token: str) -> None:
    """Stop every kernel the server runs (its sessions ended through the REST API, as closing them would)."""
    request = urllib.request.Request(f"{url}/api/sessions?token={token}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        sessions = json.load(answer)
    for session in sessions:
        delete = urllib.request.Request(f"{url}/api/sessions/{session['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(delete, timeout=60).close()


_SCROLLER = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer"  # the open notebook's scrolling panel


def notebook_screenshot(page, path: Path, most: int = 30_000, view_height: int = 4000) -> None:
    """One picture of the whole notebook (its first ``most`` pixels): the notebook scrolled a view at a
    time, the views stacked; saved with a palette of 256 colours (a third of the bytes: CI keeps one
    per lesson). The window is ``view_height`` pixels tall meanwhile (its width kept, so nothing is laid
    out anew across), then set back: each capture costs the browser a fixed part besides its pixels,
    and a lesson is a few tall views instead of ten of the window's height."""
    from PIL import Image

    size = page.viewport_size
    scroller = page.locator(_SCROLLER).first
    grown = scroller.evaluate("e => e.clientHeight") + max(0, view_height - size["height"])
    page.set_viewport_size({"width": size["width"], "height": max(view_height, size["height"])})
    try:
        page.wait_for_function(f"h => document.querySelector('{_SCROLLER}').clientHeight >= h", arg=grown)
        outer = scroller.bounding_box()
        box = {**outer, "y": outer["y"] + 2, "height": int(outer["height"]) - 4}  # inside the panel's edges
        end = "e => { const c = [...e.querySelectorAll('.jp-Cell')].pop(); return c.getBoundingClientRect().bottom "
        end += "- e.getBoundingClientRect().top + e.scrollTop + 16; }"  # the last cell's end (no scroll-past-end space)
        total = int(min(most, scroller.evaluate("e => e.scrollHeight"), scroller.evaluate(end)))
        views = []
        for top in range(0, total, box["height"]):
            shown = scroller.evaluate("(e, top) => { e.scrollTop = top; return e.scrollTop; }", top)  # the end: less
            views.append((shown, Image.open(io.BytesIO(page.screenshot(clip=box, type="jpeg", quality=90)))))
    finally:
        page.set_viewport_size(size)
    sheet = Image.new("RGB", (int(box["width"]), total), "white")
    for shown, view in views:
        sheet.paste(view.convert("RGB"), (0, int(shown)))
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.quantize(256, method=Image.Quantize.FASTOCTREE).save(path)


def fresh_copy(source: Path, sources: list[Path]) -> bool:
    """Whether ``source`` (an executed copy) exists and is newer than every file of ``sources``."""
    return source.exists() and source.stat().st_mtime >= max(p.stat().st_mtime for p in sources)

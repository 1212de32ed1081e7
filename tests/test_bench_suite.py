"""``workbench bench all`` and ``workbench bench compare``: every benchmark in its own process, one
results file (goals, machine, versions), its page, a failed or stopped benchmark recorded while the
run goes on (its processes gone), and two runs compared goal by goal against their noise.

The results come from really running ``workbench bench all --only kernels --size ci`` (a few
seconds, once per module); where a test needs a second run that differs, it says how it changed
the real run's figures.
"""

from __future__ import annotations

import argparse
import copy
import functools
import html.parser
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from workbench import cli
from workbench.bench import goals as bench_goals
from workbench.bench import page as bench_page
from workbench.bench import suite
from workbench.bench.goals import describe
from workbench.bench.progress import duration
from workbench.bench.report import VERSION as report_version
from workbench.bench.report import Report
from workbench.memory import shm
from workbench.teach import site, site_pages

ROOT = Path(__file__).resolve().parents[1]


def bench_all(out: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "workbench.cli", "bench", "all", "--out", str(out), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def kernels_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """``bench all --only kernels --size ci --json``, run for real: its directory and what it printed."""
    out = tmp_path_factory.mktemp("bench") / "run"
    done = bench_all(out, "--only", "kernels", "--size", "ci", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


@pytest.fixture
def results(kernels_run) -> dict:
    return suite.load(kernels_run[0] / "results.json")


def test_bench_all_writes_every_goal_with_the_machine_and_the_versions(kernels_run, results):
    out, done = kernels_run
    assert json.loads(done.stdout) == results  # --json prints results.json
    expected = duration(cli.BENCHMARKS["kernels"].expected_s["ci"])
    assert f"bench all: 1 benchmark, expected about {expected}" in done.stderr  # said up front
    assert "bench kernels: kernels [" in done.stderr  # the benchmark's progress, passed through
    assert results["size"] == "ci" and results["workers"] is None and results["wall_s"] > 0
    machine = results["machine"]
    assert machine["cpu"] and machine["logical_cores"] >= 1 and machine["memory_total"] > 0
    assert "on " in machine["tier_directory"]  # "<dir> on ext4 (/dev/vda), ..."
    assert isinstance(machine["caches"], list)
    versions = results["versions"]
    assert versions["numpy"] and versions["bokeh"] and versions["locality-workbench"]
    if (ROOT / ".git").exists():
        assert len(versions["git"].removesuffix("+dirty")) == 40
    [kernels] = results["benchmarks"]
    assert kernels["name"] == "kernels" and kernels["mechanism"] == cli.BENCHMARKS["kernels"].mechanism
    assert kernels["size"] == "ci" and kernels["status"] == "ok" and kernels["error"] is None
    assert 0 < kernels["wall_s"] < results["wall_s"] + 1
    assert Report.from_json(kernels["report"]).to_json() == kernels["report"] and kernels["report"]["goals"]
    assert kernels["report"]["version"] == report_version and kernels["report"]["benchmark"] == "kernels"
    for goal in kernels["report"]["goals"]:
        assert {"goal", "measured", "threshold", "better", "met", "noise", "peers", "bound"} <= set(goal)
    page = (out / "results.html").read_text()
    assert "Bokeh" in page and "https://" not in page.split("<body>")[0]  # BokehJS inlined: offline


def test_the_table_has_a_row_per_benchmark_then_every_goal(results):
    lines = suite.table_lines(results)
    row = next(line for line in lines if line.startswith("kernels "))
    kernels = results["benchmarks"][0]
    met = sum(g["met"] for g in kernels["report"]["goals"])
    assert f"{met}/{len(kernels['report']['goals'])}" in row and "numba kernels" in row and row.endswith("ok")
    for goal in kernels["report"]["goals"]:
        assert f"  {describe(goal)}" in lines


def test_a_run_compared_with_itself_is_within_noise(results):
    comparison = suite.compare(results, results)
    assert len(comparison["rows"]) == len(results["benchmarks"][0]["report"]["goals"])
    assert not comparison["only_a"] and not comparison["only_b"]
    for row in comparison["rows"]:
        assert row["change_pct"] == 0 and row["flip"] is None
        assert row["verdict"] == ("unchanged" if row["noise_pct"] is None else "within noise")


def test_compare_says_better_worse_within_noise_and_flips(results):
    """B is the real run with its figures changed by the test: the first goal 2x better, the second
    2x worse, the third by less than its noise; each file has a goal the other lacks."""
    before = copy.deepcopy(results)
    goals = before["benchmarks"][0]["report"]["goals"]
    assert len(goals) >= 3, "kernels at size ci reports at least three goals"
    for g in goals[:3]:
        g["noise"] = 0.1
    after = copy.deepcopy(before)
    changed = after["benchmarks"][0]["report"]["goals"]
    for g, factor in zip(changed, (2.0, 0.5, 1.05)):
        g["measured"] *= factor if g["better"] == "higher" else 1 / factor
        g["met"] = g["measured"] >= g["threshold"] if g["better"] == "higher" else g["measured"] <= g["threshold"]
    changed[1]["noise"] = None  # the largest noise of the two runs is still A's
    changed.append({**changed[0], "goal": "a goal only B has"})
    goals.append({**goals[0], "goal": "a goal only A has"})
    comparison = suite.compare(before, after)
    rows = {r["goal"]: r for r in comparison["rows"]}
    first, second, third = (rows[g["goal"]] for g in goals[:3])
    assert first["verdict"] == "better" and second["verdict"] == "worse" and third["verdict"] == "within noise"
    assert second["noise_pct"] == pytest.approx(10.0)
    assert abs(first["change_pct"]) in (pytest.approx(100.0), pytest.approx(50.0))
    for g, row in ((goals[0], first), (goals[1], second)):
        changed_goal = next(c for c in after["benchmarks"][0]["report"]["goals"] if c["goal"] == g["goal"])
        expected = None if g["met"] == changed_goal["met"] else ("met -> not met" if g["met"] else "not met -> met")
        assert row["flip"] == expected
    assert comparison["only_b"] == [{"benchmark": "kernels", "goal": "a goal only B has"}]
    assert comparison["only_a"] == [{"benchmark": "kernels", "goal": "a goal only A has"}]
    lines = suite.compare_lines(comparison)
    assert any(line.startswith(f"kernels: {goals[0]['goal']}: A ") and ": better" in line for line in lines)
    assert "only in B:" in lines


def test_bench_compare_command_and_its_errors(kernels_run, tmp_path, capsys):
    path = str(kernels_run[0] / "results.json")
    assert cli.main(["bench", "compare", path, path]) == 0
    printed = capsys.readouterr().out
    assert printed.count("within noise") + printed.count("unchanged") == len(
        suite.load(path)["benchmarks"][0]["report"]["goals"]
    )
    report = tmp_path / "report.json"  # a benchmark's own report: JSON, but not a results file
    report.write_text(json.dumps(suite.load(path)["benchmarks"][0]["report"]))
    text = tmp_path / "notes.txt"
    text.write_text("not json")
    for wrong, says in (
        (tmp_path / "missing.json", "no such file"),
        (report, "is not a results file"),
        (text, "is not JSON"),
    ):
        assert cli.main(["bench", "compare", path, str(wrong)]) == 2
        error = capsys.readouterr().err
        assert says in error and error.count("\n") == 1, error


def test_a_goal_of_another_shape_is_an_error_naming_the_benchmark(results, tmp_path):
    path = tmp_path / "results.json"
    for edit, says in (
        (lambda g: g.pop("threshold"), "lacks threshold"),
        (lambda g: g.update(measured="fast"), "measured of the wrong type"),
        (lambda g: g.update(goal=["a", "list"]), "goal of the wrong type"),
        (lambda g: g.update(better="sideways"), "better of the wrong type"),
        (lambda g: g.update(peers={"numba": "quick"}), "peers of the wrong type"),
    ):
        edited = copy.deepcopy(results)
        edit(edited["benchmarks"][0]["report"]["goals"][0])
        path.write_text(json.dumps(edited))
        with pytest.raises(
            suite.ResultsError, match=rf"results.json is .*: benchmarks\[0\]\.report\.goals\[0\] .* {says}"
        ):
            suite.load(path)


def test_a_results_file_is_untrusted_its_met_worked_out_again_and_a_stopped_run_said(results, tmp_path):
    path = tmp_path / "results.json"
    lying = copy.deepcopy(results)
    for g in lying["benchmarks"][0]["report"]["goals"]:
        g["met"] = not g["met"]  # hand-edited: the figures say otherwise
    lying["benchmarks"][0]["report"]["goals"][0]["noise"] = (
        None  # unknown (a NaN there is refused: bench all writes null)
    )
    path.write_text(json.dumps(lying))
    loaded = suite.load(path)
    no_figure = copy.deepcopy(results)
    no_figure["benchmarks"][0]["report"]["goals"][1]["measured"] = float("nan")  # a figure that could not be had
    suite._write_json(no_figure, tmp_path / "nan")  # strict JSON: null
    assert '"measured": null' in (tmp_path / "nan" / "results.json").read_text()
    read_back = suite.load(tmp_path / "nan" / "results.json")["benchmarks"][0]["report"]["goals"][1]
    assert math.isnan(read_back["measured"]) and read_back["met"] is False
    assert [g["met"] for g in loaded["benchmarks"][0]["report"]["goals"]] == [
        g["met"] for g in results["benchmarks"][0]["report"]["goals"]
    ]
    assert loaded["benchmarks"][0]["report"]["goals"][0]["noise"] is None  # unknown, not a whisker across the axis
    for edit, says in (
        (lambda r: r.pop("machine"), "machine is missing"),
        (lambda r: r["benchmarks"][0].pop("report"), r"benchmarks\[0\]\.report is missing"),
        (lambda r: r["benchmarks"][0]["report"].pop("goals"), r"benchmarks\[0\]\.report\.goals is missing"),
        (
            lambda r: r["benchmarks"][0]["report"].pop("version"),
            r"benchmarks\[0\]\.report\.version is missing: a report older",
        ),
        (
            lambda r: r["benchmarks"][0]["report"].update(version=0),
            r"benchmarks\[0\]\.report\.version is 0, not 1: another workbench's report",
        ),
        (lambda r: r["benchmarks"][0].update(status="fine"), r"benchmarks\[0\]\.status is .fine., not one of"),
        (lambda r: r.update(wall_s="long"), "wall_s is .long., not a number"),
    ):
        edited = copy.deepcopy(results)
        edit(edited)
        path.write_text(json.dumps(edited))
        with pytest.raises(ValueError, match=says):
            suite.load(path)
    stopped = copy.deepcopy(results)
    stopped["wall_s"] = None  # what a run stopped before its end leaves
    path.write_text(json.dumps(stopped))
    assert not suite.finished(suite.load(path))
    assert "stopped before the end" in site_pages.bench_results_markdown(suite.load(path))


def test_a_figure_from_nothing_is_a_change_and_one_run_says_nothing_of_the_noise(results):
    before, after = copy.deepcopy(results), copy.deepcopy(results)
    a, b = before["benchmarks"][0]["report"]["goals"][0], after["benchmarks"][0]["report"]["goals"][0]
    a.update(measured=0.0, better="lower", noise=None)
    b.update(measured=5.0, better="lower", noise=None)
    row = suite.compare(before, after)["rows"][0]
    assert row["verdict"] == "worse, noise unknown" and row["change_pct"] == float("inf")
    assert "inf (from 0)" in suite.compare_lines({"rows": [row], "only_a": [], "only_b": []})[3]
    from workbench.bench.goals import goal, ratio_noise

    assert goal("one run each", 2.0, 1.0, noise=ratio_noise([1.0], [2.0]))["noise"] is None


def test_the_site_page_escapes_what_a_results_file_holds(results):
    hostile = copy.deepcopy(results)
    hostile["size"] = "<script>alert(1)</script>"
    hostile["benchmarks"][0]["report"]["goals"][0]["goal"] = "[click](javascript:alert(1)) *loud* `code`"
    text = site_pages.bench_results_markdown(hostile)
    assert "<script>" not in text and "](javascript:" not in text and "`code`" not in text
    assert "\\[click\\]" in text and "\\<script\\>" in text  # each mark escaped: MyST reads text
    assert_site_shows_as_text(hostile)


def test_the_page_of_figures_typesets_no_tex_from_a_results_file(results):
    """Bokeh typesets TeX between $$ with MathJax in a Div, a title and an axis label: a results
    file's text (a goal, a peer unit, a mechanism, the host) is shown as the text it is."""
    from bokeh.models import Axis, Div, Title

    tex = "$$\\href{https://example.invalid}{click}$$"
    hostile = copy.deepcopy(results)
    hostile["machine"]["hostname"] = tex
    b = hostile["benchmarks"][0]
    b["mechanism"] = tex
    b["report"]["goals"][0].update(goal=tex, peer_unit=tex, peers={"a": 1.0, "b": 2.0})
    models = list(bench_page.build(hostile).references())
    divs = [m for m in models if isinstance(m, Div)]
    assert divs and all(d.disable_math for d in divs)
    labels = [m.text for m in models if isinstance(m, Title)] + [m.axis_label for m in models if isinstance(m, Axis)]
    assert not [label for label in labels if isinstance(label, str) and "$$" in label], labels


def _recording_popen(monkeypatch) -> list[int]:
    """Make ``suite`` record the pid of each benchmark process it starts (the group's id too)."""
    pids: list[int] = []

    class Recording(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if "workbench.cli" in args[0]:  # not git's, which the results' versions ask
                pids.append(self.pid)

    monkeypatch.setattr(suite.subprocess, "Popen", Recording)
    return pids


@pytest.mark.timeout(180)
def test_a_benchmark_that_fails_or_runs_out_of_time_is_recorded_and_its_processes_are_gone(monkeypatch, tmp_path):
    """shm at size ci (a Dask cluster of worker processes) stopped after 6 s, then a benchmark that
    does not exist: both recorded, the run goes on, and nothing of the stopped one is left."""
    pids = _recording_popen(monkeypatch)
    planned = [
        suite.Planned("shm", "node-shared memory (RRO)", "ci", 10, True),
        suite.Planned("no-such", "x", "ci", 1, False),
    ]
    most: dict[int, int] = {}
    done = threading.Event()

    def watch() -> None:  # the stopped benchmark's process group had its workers while it ran
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            if pids:
                most[pids[0]] = max(most.get(pids[0], 0), len(suite.group_members(pids[0])))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = suite.run_all(planned, tmp_path, workers=2, limit=lambda p: 6.0)
    finally:
        done.set()
        watcher.join(timeout=30)
    stopped, missing = results["benchmarks"]
    if "it left segments " in stopped["error"]:  # complete ones, which shm clean keeps: removed here
        for name in stopped["error"].split("it left segments ")[1].split(" (")[0].split(", "):
            shm.delete(name)
    assert stopped["status"] == "timed out" and "time limit of 6 s" in stopped["error"], stopped["error"]
    assert 6 <= stopped["wall_s"] < 30 and stopped["report"] is None
    assert missing["status"] == "failed" and "invalid choice: 'no-such'" in missing["error"], missing["error"]
    assert suite.failed(results) == ["shm", "no-such"]
    assert most[pids[0]] >= 3, "the benchmark and its 2 workers ran in one process group"
    assert suite.group_members(pids[0]) == [] and suite.group_members(pids[1]) == []
    assert not [s.name for s in shm.list_segments() if s.state == "partial" and not s.owner_alive]  # cleaned
    assert (tmp_path / "results.json").is_file() and (tmp_path / "results.html").is_file()


def test_the_site_page_shows_the_latest_results_of_this_machine(kernels_run, results, tmp_path):
    source = kernels_run[0] / "results.json"
    runs = tmp_path / "bench"
    for name, host, age_s in (("old", None, 100), ("new", None, 10), ("elsewhere", "another-host", 0)):
        (runs / name).mkdir(parents=True)
        data = json.loads(source.read_text())
        data["machine"]["hostname"] = host or data["machine"]["hostname"]
        (runs / name / "results.json").write_text(json.dumps(data))
        os.utime(runs / name / "results.json", (time.time() - age_s,) * 2)
    (runs / "broken").mkdir()
    (runs / "broken" / "results.json").write_text("{")
    (runs / "stopped").mkdir()  # the newest, but stopped before its end (or still running)
    (runs / "stopped" / "results.json").write_text(json.dumps({**json.loads(source.read_text()), "wall_s": None}))
    host = results["machine"]["hostname"]
    assert site.latest_bench_results(runs, host) == runs / "new" / "results.json"
    assert site.latest_bench_results(tmp_path / "nothing", host) is None

    page = tmp_path / "site"
    (page / site.COURSE_DIR).mkdir(parents=True)  # the site is laid out like the repository
    (page / site.COURSE_DIR / "bench-results.md").write_text((site.COURSE / "bench-results.md").read_text())
    site._bench_results_page(page, source)
    text = (page / site.COURSE_DIR / "bench-results.md").read_text()
    assert site_pages.NO_BENCH_RESULTS.split(".")[0] not in text
    up = "../" * len(Path(site.COURSE_DIR).parts)  # from the page's folder to the site's top
    assert f'<a href="{up}bench/results.html">' in text and f"**{site_pages._cell(host)}**" in text
    for goal in results["benchmarks"][0]["report"]["goals"]:
        assert site_pages._cell(goal["goal"]) in text
    figures = (page / "_extra" / "bench" / "results.html").read_text()
    assert f'src="../_static/{site_pages.bokeh_js_name()}"' in figures and len(figures) < 500_000  # not inlined


# -- crafted results files (issue 35, item 9) --------------------------------------------------------
# A results file is untrusted: load() refuses one that is not as bench all writes it, in one line naming
# the file and the field, and what it returns is shown by the page and the site only as text.
# What no text may hold, as the issue lists it: C0/C1 controls (line breaks for markdown-it and
# str.splitlines among them), the Unicode line and paragraph separators, lone surrogates.
CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
SEPARATORS = ("\r", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
MYST = (  # each takes effect at a line's start, or anywhere in a line (roles, substitutions, HTML, links)
    ":::{include} /etc/passwd",
    "```{include} /etc/passwd",
    "~~~",
    "(secret-label)=",
    "% a comment",
    "<div>html block</div>",
    "<!-- html comment -->",
    "$$ x^2 $$",
    "[x]: https://example.org",
    "[^1]: a footnote",
    "+++",
    "# a heading",
    "- a list item",
    "> a quote",
    "    indented code",
    "| a | table |",
    "{{ cycler.__init__.__globals__.os.getpid() }}",
    "{eval-rst}`x`",
    "{ref}`label`",
    "[link](javascript:alert(1))",
    "<https://example.org>",
    "<script>alert(1)</script>",
    "**bold** _em_ ~~struck~~ `code`",
    "&amp; &#123; \\",
)


def report_json(name: str, goals: list[dict]) -> dict:
    """A benchmark's report as it prints it (``--json``) with these goals."""
    return Report(name, "ci", goals).to_json()


def synthetic_results(text: str = "fast", *, status: str = "ok") -> dict:
    """A results dict of the shape bench all writes (no benchmark run): ``text`` in the first goal's
    words; ``status``: the second benchmark's."""
    from workbench.bench.goals import goal

    goals = [
        goal(text, 12.5, 20.0, peers={"numba": 0.5, "numpy": 6.25}, noise=0.2, bound="memory bandwidth"),
        goal("a time at most", 0.25, 1.0, better="lower", unit=" s"),
    ]
    failed = {"status": status, "error": None if status == "ok" else "exit status 1: ValueError: no"}
    failed["report"] = report_json("shm", goals) if status == "ok" else None
    return suite.strict_json(
        {
            "size": "ci",
            "workers": 2,
            "started": "2026-11-27T08:44:17+00:00",
            "wall_s": 14.9,
            "machine": {
                "hostname": "vm",
                "cpu": "Intel(R) Xeon(R) Processor",
                "logical_cores": 2,
                "memory_total": 25276063744,
                "tier_directory": "/tmp/tiers on ext4 (/dev/vda)",
                "caches": [{"level": 1, "type": "Data", "size": 49152}, {"level": 3, "type": "Unified", "size": 2**29}],
            },
            "versions": {"numpy": "2.4.6", "bokeh": "3.9.2", "git": "33674cf4+dirty", "locality-workbench": None},
            "benchmarks": [
                {"name": "kernels", "mechanism": "numba kernels", "size": "ci", "wall_s": 14.9, "status": "ok",
                 "error": None, "report": report_json("kernels", goals)},
                {"name": "shm", "mechanism": "node-shared memory (RRO)", "size": "ci", "wall_s": 6.0, **failed},
            ],
        }
    )  # fmt: skip


def _write(tmp_path: Path, results: dict | str, name: str = "results.json") -> Path:
    path = tmp_path / name
    path.write_text(results if isinstance(results, str) else json.dumps(results))
    return path


@functools.cache
def _myst():
    """A MyST parser as the course site's Jupyter Book parses its pages (the site's own extensions)."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    extensions = set(site._config()["parse"]["myst_enable_extensions"])
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


BLOCKS = {"paragraph", "inline", "heading", "table", "thead", "tbody", "tr", "th", "td"}
OWN_HTML = ('<a href="bench/results.html">', "</a>")  # the one link the section makes itself


def site_texts(markdown: str) -> list[str]:
    """The texts MyST reads in ``markdown``, one per paragraph, heading or table cell, after checking
    that it reads nothing else: no directive, role, substitution, target, comment, math, HTML (but the
    section's own link), link, code or list; only text, in the section's own bold."""
    texts = []
    for token in _myst().parse(markdown):
        assert token.type.removesuffix("_open").removesuffix("_close") in BLOCKS, (token.type, token.content)
        if token.type != "inline":
            continue
        for child in token.children or []:
            assert child.type in {"text", "strong_open", "strong_close", "softbreak", "html_inline"}, child.type
            assert child.type != "html_inline" or child.content in OWN_HTML, child.content
        texts.append("".join(c.content for c in token.children or [] if c.type == "text"))
    return texts


def _words(text: str) -> str:
    return " ".join(str(text).split())


def assert_site_shows_as_text(results: dict) -> None:
    """The site's section on ``results`` is text only, and every text field is in it, word for word."""
    shown = "\n".join(_words(t) for t in site_texts(site_pages.bench_results_markdown(results)))
    for text in _text_fields(results, page=False):
        assert _words(text) in shown, (text, shown)


def _text_fields(results: dict, page: bool) -> list[str]:
    """The text fields of ``results`` that the site (``page``: the page of figures) shows."""
    m = results["machine"]
    texts = [m["hostname"], m["cpu"], results["started"], results["size"] or ""]
    texts += [m.get("tier_directory") or "", *(f"{k} {v}" for k, v in results["versions"].items() if v)] if page else []
    texts += [results["versions"].get("git") or ""] if not page else []
    for b in results["benchmarks"]:
        texts += [b["name"], b["mechanism"], b["size"], b["status"]] + ([b["error"]] if b["status"] != "ok" else [])
        for g in b["report"]["goals"] if b["report"] else []:
            unit = (g.get("unit") or "").strip()  # shown after the figure without its outer spaces (goals._unit)
            texts += [g["goal"], unit] + ([g["bound"]] if g.get("bound") and not g["met"] else [])
    return texts


class _HTMLText(html.parser.HTMLParser):
    """The tags and the text of an HTML fragment (character references read as the text they stand for)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        assert {name for name, _ in attrs} <= {"style"}, attrs

    def handle_data(self, data: str) -> None:
        self.texts.append(data)

    def unknown_decl(self, data: str) -> None:
        raise AssertionError(f"markup in a div: {data!r}")

    handle_comment = handle_pi = handle_decl = unknown_decl


def assert_page_shows_as_text(results: dict) -> None:
    """The page of figures renders (its layout made and serialised, as page_html does), its HTML blocks
    hold only the page's own tags, and every text field is in their text."""
    from bokeh.embed import components
    from bokeh.models import Div

    layout = bench_page.build(results)
    assert "<script" in components(layout)[0]
    read = _HTMLText()
    for div in layout.select({"type": Div}):
        read.feed(div.text)
        read.close()
    assert read.tags <= {"h1", "h2", "p", "small", "table", "tr", "td", "th"}, read.tags
    shown = "\n".join(read.texts)
    for text in _text_fields(results, page=True):
        assert text in shown, (text, shown)


def assert_refused_in_one_line(path: Path, error: BaseException, field: str = "") -> None:
    message = str(error)
    assert isinstance(error, getattr(suite, "ResultsError", ())), repr(error)  # the one error type
    assert message.startswith(str(path)) and field in message, message
    assert not CONTROLS.search(message), message  # one line, nothing for a terminal to act on


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_a_line_break_in_a_text_field_is_refused_and_the_site_shows_it_as_text(separator, tmp_path):
    """A carriage return got past the site's escaping (only \\n was): the line after it began a MyST
    directive, ``{include}`` of a local file. load() now refuses every line break, and the site's
    escaping makes any of them a space, so the text never begins a line."""
    crafted = separator.join(["fast", ":::{include} /etc/passwd", ":::", "```{include} /etc/passwd", "```"])
    results = synthetic_results(crafted)
    results["machine"]["cpu"] = crafted
    with pytest.raises(ValueError, match=r"machine\.cpu holds the control character") as refused:
        suite.load(_write(tmp_path, results))
    assert_refused_in_one_line(tmp_path / "results.json", refused.value, "machine.cpu")
    text = site_pages.bench_results_markdown(results)  # had it got past load: text still
    assert "include" in "".join(site_texts(text))


@pytest.mark.parametrize("payload", MYST)
def test_myst_syntax_in_a_text_field_is_shown_as_text_in_the_site_and_the_page(payload, tmp_path):
    """Every MyST construct, in every text field the site shows, at a line's start or not: text. A
    substitution ``{{ ... }}`` was markup (MyST evaluates it as a Jinja expression at the site's build:
    any Python); HTML, links and roles were escaped already."""
    results = synthetic_results(payload)
    for b in results["benchmarks"]:
        b["mechanism"] = payload  # a heading: "### <mechanism>"
    results["machine"]["hostname"] = payload  # in bold
    results["benchmarks"][1]["error"] = payload
    loaded = suite.load(_write(tmp_path, results))
    assert_site_shows_as_text(loaded)
    assert_page_shows_as_text(loaded)


@pytest.mark.parametrize(
    ("literal", "field"),
    [
        ("1" + "0" * 400, "benchmarks[0].report.goals[0].measured"),  # was an OverflowError
        ("-" + "9" * 5000, "benchmarks[0].report.goals[0].measured"),  # past Python's 4300 digits
        ("1e400", "benchmarks[0].report.goals[0].measured"),  # read as infinity
        ("NaN", "benchmarks[0].report.goals[0].measured"),  # Python's JSON reads it; bench all writes null
        ("-Infinity", "benchmarks[0].report.goals[0].measured"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64"),  # was a RecursionError
    ],
    ids=["1e400 as an integer", "5000 digits", "1e400", "NaN", "-Infinity", "100000 deep"],
)
def test_a_huge_number_or_deep_nesting_is_a_one_line_error_of_bench_compare(literal, field, tmp_path, capsys):
    good = _write(tmp_path, synthetic_results(), "good.json")
    text = json.dumps(synthetic_results()).replace('"measured": 12.5', f'"measured": {literal}', 1)
    bad = _write(tmp_path, text, "bad.json")
    assert cli.main(["bench", "compare", str(good), str(bad)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(bad) in error and field in error, error
    with pytest.raises(ValueError) as refused:
        suite.load(bad)
    assert_refused_in_one_line(bad, refused.value, field)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["machine"].update(caches=[1]), "machine.caches[0] is a number"),  # the page: TypeError
        (lambda r: r["machine"].update(caches=[{}]), "machine.caches[0].level is missing"),  # KeyError
        (lambda r: r["machine"]["caches"][0].update(type=2), "machine.caches[0].type is not text"),
        (lambda r: r["machine"]["caches"][0].update(size="big"), "machine.caches[0].size is 'big'"),
        (
            lambda r: r["benchmarks"][0]["report"]["goals"][0].update(threshold=10**300 * 10**100),
            ".goals[0].threshold is 1",
        ),
        (
            lambda r: r["benchmarks"][0]["report"]["goals"][0]["peers"].update(numba=10**400),
            ".goals[0].peers.numba is 1",
        ),
        (lambda r: r["machine"].update(memory_total=10**400), "machine.memory_total is 1"),  # OverflowError
        (lambda r: r["benchmarks"][0]["report"]["goals"][0].update(noise=-0.5), "noise of the wrong type"),
        (lambda r: r["benchmarks"][1].update(error=None), "benchmarks[1].error is missing"),
        (lambda r: r["versions"].update(numpy=["2", "4"]), "versions.numpy is not text"),
        (lambda r: r.update(workers="two"), "workers is 'two'"),
        (lambda r: r["benchmarks"][0].update(name="kernels\x1b[2J"), "benchmarks[0].name holds the control"),
        (lambda r: r["machine"].update(hostname="vm\ud800"), "machine.hostname holds the control"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_fields_the_page_or_site_cannot_show_are_refused_by_load(edit, field, tmp_path):
    """Each was accepted by load() and then crashed the page or the site (TypeError, KeyError,
    AttributeError, OverflowError), printed a terminal code, or could not be written as UTF-8."""
    results = synthetic_results(status="failed")
    edit(results)
    path = _write(tmp_path, results)
    with pytest.raises(ValueError) as refused:
        suite.load(path)
    assert_refused_in_one_line(path, refused.value, field)


def test_what_load_returns_is_shown_and_compared(tmp_path):
    """The synthetic file (a failed benchmark, a peer that could not be had) loads, every goal's
    figures as floats, and the page, the site and compare show it."""
    results = synthetic_results(status="failed")
    results["benchmarks"][0]["report"]["goals"][0]["peers"]["numba"] = None  # NaN, in strict JSON
    results["benchmarks"][0]["report"]["goals"][0]["threshold"] = 20  # an integer, as another tool may write it
    loaded = suite.load(_write(tmp_path, results))
    g = loaded["benchmarks"][0]["report"]["goals"][0]
    assert math.isnan(g["peers"]["numba"]) and g["threshold"] == 20.0 and isinstance(g["threshold"], float)
    assert_site_shows_as_text(loaded)
    assert_page_shows_as_text(loaded)
    assert "within noise" in "\n".join(suite.compare_lines(suite.compare(loaded, loaded)))


def test_bench_all_writes_an_error_line_load_reads_back():
    """A benchmark's last stderr line may hold colour codes or tabs: the record holds it as one line
    of text (what load() reads back), cut to MAX_TEXT."""
    planned = suite.Planned("kernels", "numba kernels", "ci", 1, False)
    line = "\x1b[31mValueError:\tno\x1b[0m\r" + "x" * 5000
    error = suite._outcome(planned, "failed", 1, "", [line], 10)["error"]
    assert not CONTROLS.search(error) and error.startswith("exit status 1: ValueError: no")
    assert len(error) <= bench_goals.MAX_TEXT


# A crafted file: a results file of bench all's shape with a few fields replaced or removed, or cut short.
class _Raw:
    """A JSON token written as is (numbers Python writes otherwise, or not at all, and deep nesting)."""

    def __init__(self, token: str):
        self.token = token


RAW_NUMBERS = ("1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" + "0" * 400, "-" + "9" * 5000, "1e-400", "1e30")
clean_text = st.one_of(
    st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12),
    st.lists(st.sampled_from(MYST), min_size=1, max_size=3).map(" ".join),
)
any_text = st.one_of(
    clean_text,
    st.text(max_size=12),
    st.lists(st.one_of(st.sampled_from(MYST), st.sampled_from((*SEPARATORS, "\x00", "\x1b[31m", "\t", "\ud800"))),
             max_size=5).map("".join),
)  # fmt: skip
figure = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.integers(-(10**9), 10**9), st.just(math.nan))
wrong_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    any_text,
    st.sampled_from(RAW_NUMBERS),  # as strings: "1e400", "NaN"
    st.sampled_from(RAW_NUMBERS).map(_Raw),
    st.sampled_from((65, 1000, 100_000)).map(lambda n: _Raw("[" * n + "]" * n)),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(any_text, st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_the_sites_escaping_shows_any_text_as_text_in_a_cell_a_heading_and_a_paragraph(text):
    """Without load()'s check too: any text, line breaks and controls included, is text to MyST (its
    controls as spaces) wherever the section puts one."""
    cell = site_pages._cell(text)
    markdown = f"| {cell} | x |\n|---|---|\n| {cell} | y |\n\n### {cell}\n\nsaid {cell}\n"
    shown = [_words(t) for t in site_texts(markdown)]
    expected = _words(CONTROLS.sub(" ", text))
    assert shown == [expected, "x", expected, "y", expected, _words(f"said {expected}")], (text, shown)


@st.composite
def a_goal(draw) -> dict:
    """One goal of a benchmark, as ``workbench.bench.goals.goal`` makes it, from drawn texts and figures."""
    from workbench.bench.goals import goal

    return goal(
        draw(clean_text),
        draw(figure),
        draw(st.floats(1e-3, 1e3)),
        better=draw(st.sampled_from(("higher", "lower"))),
        unit=draw(clean_text),
        peers=draw(st.dictionaries(clean_text, figure, max_size=3)),
        noise=draw(st.none() | st.floats(0, 2)),
        bound=draw(st.none() | clean_text),
    )


@st.composite
def a_benchmark(draw) -> dict:
    """One benchmark's entry of ``bench all``'s results: goals only when it ran to the end."""
    status = draw(st.sampled_from(suite.STATUSES))
    goals = draw(st.lists(a_goal(), max_size=3)) if status == "ok" else []
    return {
        "name": draw(clean_text), "mechanism": draw(st.sampled_from(("numba kernels", "RRO")) | clean_text),
        "size": draw(clean_text), "wall_s": draw(st.floats(0, 1e5)), "status": status,
        "error": None if status == "ok" else draw(clean_text),
        "report": Report(draw(clean_text), draw(clean_text), goals=goals).to_json() if status == "ok" else None,
    }  # fmt: skip


@st.composite
def a_results_file(draw) -> dict:
    """A whole results file of ``bench all``'s shape (the machine, the versions, the benchmarks)."""
    caches = st.lists(
        st.fixed_dictionaries({"level": st.integers(1, 4), "type": clean_text, "size": st.integers(0, 2**30)}),
        max_size=3,
    )
    return suite.strict_json(
        {
            "size": draw(st.none() | clean_text),
            "workers": draw(st.none() | st.integers(1, 64)),
            "started": draw(clean_text),
            "wall_s": draw(st.none() | st.floats(0, 1e5)),
            "machine": {
                "hostname": draw(clean_text),
                "cpu": draw(clean_text),
                "logical_cores": draw(st.integers(1, 512)),
                "memory_total": draw(st.integers(0, 2**50)),
                "tier_directory": draw(clean_text),
                "caches": draw(caches | clean_text),
            },
            "versions": draw(st.dictionaries(clean_text, st.none() | clean_text, max_size=3)),
            "benchmarks": draw(st.lists(a_benchmark(), max_size=3)),
        }
    )


def break_fields(draw, results: dict) -> None:
    """Replace (by a :data:`wrong_value`) or remove 0 to 3 fields anywhere in ``results``, in place."""
    for _ in range(draw(st.integers(0, 3))):
        containers = [([], results)]  # (path, container) of every object and array
        for path, container in containers:
            items = container.items() if isinstance(container, dict) else enumerate(container)
            containers += [([*path, k], v) for k, v in items if isinstance(v, (dict, list))]
        path, container = draw(st.sampled_from(containers))
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        if not keys:
            continue
        key = draw(st.sampled_from(keys))
        if isinstance(container, dict) and draw(st.booleans()):
            del container[key]
        else:
            container[key] = draw(wrong_value)


def encoded(results: dict) -> bytes:
    """``results`` as JSON text, each :class:`_Raw` value written as its token (a number JSON cannot
    hold, nesting deeper than a parser allows) rather than as a string."""
    raws: list[str] = []

    def placeholders(value):
        if isinstance(value, _Raw):
            raws.append(value.token)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(value, dict):
            return {k: placeholders(v) for k, v in value.items()}
        return [placeholders(v) for v in value] if isinstance(value, list) else value

    text = json.dumps(placeholders(results))
    for number, token in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{number}\x00"), token, 1)
    return text.encode()


@st.composite
def crafted_file(draw) -> bytes:
    """A results file of bench all's shape, its texts and figures drawn, then 0 to 3 fields replaced
    (by a value of another type, a text with controls and MyST, a huge or non-finite number, deep
    nesting) or removed, or the file cut short."""
    results = draw(a_results_file())
    break_fields(draw, results)
    data = encoded(results)
    return data[: draw(st.integers(0, len(data)))] if draw(st.integers(0, 9)) == 0 else data


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(crafted_file())
def test_a_crafted_results_file_is_refused_in_one_line_or_shown_only_as_text(data):
    """Whatever the file holds: load() returns, or raises its one-line ResultsError (never TypeError,
    KeyError, OverflowError or RecursionError); what it returns is compared, drawn by the page and
    written into the site, every text field there as text and nothing else."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "results.json"
        path.write_bytes(data)
        try:
            results = suite.load(path)
        except ValueError as error:
            assert_refused_in_one_line(path, error)
            event("refused")
            return
    event("loaded")
    lines = suite.compare_lines(suite.compare(results, results))
    assert not CONTROLS.search("".join(lines))  # nothing for a terminal to act on
    assert_site_shows_as_text(results)
    assert_page_shows_as_text(results)


def test_make_bench_node_runs_the_node_checks_at_16_workers_each_taking_the_workers():
    """What an instructor runs on a cluster node the day before a course (issue 36): the shm, splitter
    and store benchmarks at 16 workers, through ``bench all`` (a dry run of make: nothing is started)."""
    dry = subprocess.run(["make", "-n", "bench-node"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert dry.returncode == 0, dry.stderr
    line = next(x for x in dry.stdout.splitlines() if "bench all" in x)
    assert "--workers 16" in line
    only = line.split("--only ", 1)[1].split()[0].split(",")
    assert only == ["shm", "splitter", "store"]
    args = cli.build_parser().parse_args(["bench", "all", "--workers", "16", "--only", ",".join(only)])
    planned = cli._planned(args)
    assert [p.name for p in planned] == only and all(p.takes_workers for p in planned)
    assert all("--workers" in p.command(16) and "16" in p.command(16) for p in planned)


@pytest.mark.parametrize(
    ("unit", "text"),
    [("x", "2.5x"), ("ms", "2.5ms"), ("messages", "2.5 messages"), ("tasks + deps", "2.5 tasks + deps"),
     ("GB/s", "2.5 GB/s"), (" arrays", "2.5 arrays"), ("", "2.5")],
)  # fmt: skip
def test_a_goals_unit_is_joined_when_a_symbol_and_apart_when_words(unit, text):
    g = bench_goals.goal("a goal", 2.5, 1.0, unit=unit)
    assert bench_goals.figure_text(g) == text


def test_a_derived_threshold_is_written_to_three_figures_and_a_whole_one_whole():
    assert "(goal <= 3.15x" in bench_goals.describe(bench_goals.goal("g", 2.6, 3.15348, better="lower"))
    assert "(goal <= 65536B" in bench_goals.describe(bench_goals.goal("g", 0, 65536, better="lower", unit="B"))


def test_bench_all_leaves_out_what_this_machine_cannot_run_and_says_why(capsys):
    planned = cli._planned(argparse.Namespace(only=["kernels", "gpu"], size="ci", lessons=None))
    reason = cli.BENCHMARKS["gpu"].why_not()
    if reason is None:  # a GPU is here: it runs
        assert [p.name for p in planned] == ["kernels", "gpu"]
        return
    assert [p.name for p in planned] == ["kernels"]
    assert f"bench all: gpu left out: {reason}" in capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "bench", "gpu", "--size", "ci", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Report.from_json(json.loads(done.stdout)) == Report("gpu", "ci", skipped=reason)
    assert f"bench gpu: skipped: {reason}" in done.stderr


def test_bench_device_runs_the_nodes_three_the_gpu_and_lesson_10_at_lab_from_a_bundle(tmp_path):
    """make bench-device: installs the GPU extra from WHEELS with no index, then one 'bench all' of
    bench-node's three, gpu and the lessons benchmark with lesson 10 only, every one at size lab."""
    dry = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "bench-device", f"WHEELS={tmp_path}"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert all(f"--no-index --find-links {tmp_path}" in x for x in dry.stdout.splitlines() if "pip install" in x)
    line = next(x for x in dry.stdout.splitlines() if "bench all" in x)
    args = cli.build_parser().parse_args(line.split("workbench ", 1)[1].split())
    planned = {p.name: p for p in cli._planned(args)}
    assert {"shm", "splitter", "store", "lessons"} <= set(planned) <= {"shm", "splitter", "store", "gpu", "lessons"}
    assert all(p.size == "lab" for p in planned.values()) and args.workers == 16
    assert planned["lessons"].command()[-2:] == ["--only", "10"]
    assert planned["lessons"].expected_s == cli.BENCHMARKS["lessons"].expected_s["lab"] / len(cli._lesson_numbers())

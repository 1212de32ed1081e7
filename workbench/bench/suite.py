"""Every benchmark in one run (``workbench bench all``), its results file, and two runs compared.

Each benchmark runs in a process of its own (``python -m workbench.cli bench NAME --json``): a
benchmark that crashes, hangs or leaks takes only itself down, and its time limit can be enforced by
killing its process group (the Dask workers it started included). Its progress lines (stderr) are
passed through as they come; its report (stdout) is kept whole. The run writes one file,
``results.json``::

    {"size", "workers", "started", "wall_s", "machine", "versions",
     "benchmarks": [{"name", "mechanism", "size", "wall_s", "status", "error", "report"}]}

where a benchmark's ``report`` is its :class:`workbench.bench.report.Report` as JSON (with its version;
null for one that failed or was stopped)
and the page ``results.html`` (:mod:`workbench.bench.page`). Goals are never assertions: a run
whose goals are not met still succeeds; only a benchmark that failed or ran out of time fails it.
:func:`compare` matches two files' goals by (benchmark, goal text) and tells a change from the
noise each run saw between its repeats.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import psutil

from workbench.bench.goals import CONTROL, MAX_NUMBER, describe, is_figure, is_number, printable, text_problem
from workbench.bench.page import write_page
from workbench.bench.progress import duration
from workbench.bench.report import Column, Report, ReportError, of_record, table

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "bench"  # where runs go unless told: OUT/<hostname>-<YYYYmmdd-HHMMSS>/
MIN_LIMIT_S = 600.0  # a benchmark's time limit is at least this, else LIMIT_FACTOR x its expected time
LIMIT_FACTOR = 4.0  # a slower machine (or a busy one) may take a few times what 2 idle cores took
STOP_GRACE_S = 5.0  # SIGTERM, then this long before SIGKILL
ERROR_LINES = 20  # the last stderr lines of a failed benchmark kept in its record
STATUSES = ("ok", "failed", "timed out")


@dataclass(frozen=True)
class Planned:
    """One benchmark as ``bench all`` runs it: its name, mechanism, size, the seconds expected at that
    size on 2 cores, whether it takes ``--workers``, and any more options of its own."""

    name: str
    mechanism: str
    size: str
    expected_s: float
    takes_workers: bool
    options: tuple[str, ...] = ()  # more of its own options (``bench all --lessons 10``: ``--only 10``)

    def command(self, workers: int | None = None) -> list[str]:
        """The command line that runs it, its report as JSON on stdout."""
        command = [sys.executable, "-m", "workbench.cli", "bench", self.name, "--json", "--size", self.size]
        if workers is not None and self.takes_workers:
            command += ["--workers", str(workers)]
        return command + list(self.options)


def time_limit(planned: Planned) -> float:
    """Seconds a benchmark may run before it is stopped: ``max(600, 4 x expected)``."""
    return max(MIN_LIMIT_S, LIMIT_FACTOR * planned.expected_s)


# -- one benchmark ---------------------------------------------------------------------------------
def _pass_through(stream: TextIO, to: TextIO, tail: deque[str]) -> None:
    """Copy ``stream`` to ``to`` line by line as it comes, keeping the last lines in ``tail``."""
    for line in stream:
        to.write(line)
        to.flush()
        tail.append(line.rstrip("\n"))


def _stop_group(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """End ``process`` and every process of its group (SIGTERM, then SIGKILL), and wait until none is left."""
    group = process.pid
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if process.poll() is not None and not group_members(group):
                return
            time.sleep(0.05)
    process.wait(timeout=30)
    left = group_members(group)
    if left:
        raise RuntimeError(f"processes {left} of a stopped benchmark survived SIGKILL for 30 s")


def group_members(group: int) -> list[int]:
    """The live processes (not zombies) of process group ``group``."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.info["pid"]) == group:
                members.append(proc.info["pid"])
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _clean_segments(before: set[str]) -> str:
    """After a stopped benchmark: remove what its dead processes left (``workbench shm clean``:
    partial files, free locks, transient segments); say which complete segments it left that no
    process maps (kept, as ``shm clean`` keeps them: ``workbench shm clean --all`` removes them)."""
    from workbench.memory import shm

    try:
        shm.clean()
        left = [s.name for s in shm.list_segments() if s.name not in before and not s.mapped_by]
    except shm.SharedMemoryError:  # no /dev/shm: nothing was left there
        return ""
    return f"; it left segments {', '.join(left)} ('workbench shm clean --all' removes them)" if left else ""


def _segment_names() -> set[str]:
    from workbench.memory import shm

    try:
        return {s.name for s in shm.list_segments()}
    except shm.SharedMemoryError:
        return set()


def run_one(
    planned: Planned, workers: int | None = None, limit_s: float | None = None, stderr: TextIO | None = None
) -> dict[str, Any]:
    """Run one benchmark in its own process group and return its record (never raises for the
    benchmark's own failure: a failed or stopped run is a record with its ``status`` and ``error``)."""
    limit_s = time_limit(planned) if limit_s is None else limit_s
    stderr = sys.stderr if stderr is None else stderr
    record: dict[str, Any] = {"name": planned.name, "mechanism": planned.mechanism, "size": planned.size}
    before = _segment_names()
    tail: deque[str] = deque(maxlen=ERROR_LINES)
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout:
        process = subprocess.Popen(
            planned.command(workers), stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        reader = threading.Thread(target=_pass_through, args=(process.stderr, stderr, tail), daemon=True)
        reader.start()
        try:
            process.wait(timeout=limit_s)
            status = "ok" if process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            status = "timed out"
        except BaseException:  # Ctrl-C reaches only this process (the benchmark has a session of its own)
            _stop_group(process)
            _clean_segments(before)
            raise
        wall_s = time.perf_counter() - started
        if status == "timed out" or group_members(process.pid):  # its leftovers die with it
            _stop_group(process)
        reader.join(timeout=30)
        process.stderr.close()
        stdout.seek(0)
        output = stdout.read()
    record["wall_s"] = round(wall_s, 3)
    record.update(_outcome(planned, status, process.returncode, output, list(tail), limit_s))
    if record["status"] != "ok":  # one line of text, as load() reads it back (no colour codes, no line breaks)
        record["error"] = printable(record["error"] + _clean_segments(before))
    return record


def _outcome(
    planned: Planned, status: str, returncode: int | None, output: str, tail: list[str], limit_s: float
) -> dict[str, Any]:
    """The record's status, error and report from how the process ended and what it printed."""
    last = next((line for line in reversed(tail) if line.strip()), "")
    if status == "timed out":  # where it got to: its last progress line
        where = next((line for line in reversed(tail) if line.startswith(f"bench {planned.name}: ")), last)
        return _failure("timed out", f"stopped after its time limit of {limit_s:.0f} s; last line: {where}")
    if status == "failed":
        return _failure("failed", f"exit status {returncode}: {last or 'nothing on stderr'}")
    try:
        report = Report.from_json(json.loads(output))
    except json.JSONDecodeError as error:
        return _failure("failed", f"its output is not a report (not JSON: {error})")
    except ReportError as error:
        return _failure("failed", f"its output is not a report: {error}")
    return {"status": "ok", "error": None, "report": report.to_json()}


def _failure(status: str, error: str) -> dict[str, Any]:
    """A failed record; its error one line of text, as :func:`load` reads it back (no colour codes)."""
    return {"status": status, "error": printable(error), "report": None}


# -- every benchmark -------------------------------------------------------------------------------
def machine_record() -> dict[str, Any]:
    """:func:`workbench.machine.describe`, the medium under the tier directory and the CPU's caches."""
    from workbench import machine
    from workbench.lab.node_locality import read_caches
    from workbench.memory import tiers

    info = machine.describe()
    for key in ("hostname", "cpu"):  # shown on the page: text as load() reads it back
        info[key] = printable(str(info[key]))
    try:
        info["tier_directory"] = tiers.medium(tiers.default_directory("mapped")).describe()
    except tiers.TierError as error:
        info["tier_directory"] = f"unusable: {error}"
    info["tier_directory"] = printable(info["tier_directory"])
    try:
        caches = read_caches()
    except ValueError as error:  # a malformed sysfs file: said, not guessed
        info["caches"] = printable(f"unreadable: {error}")
    else:
        info["caches"] = [{"level": c.level, "type": c.kind, "size": c.size_bytes} for c in caches]
    return info


def versions() -> dict[str, Any]:
    """The packages' versions, the workbench's, and its git revision when run from a git checkout
    (``+dirty`` when files differ from it)."""
    import importlib.metadata

    from workbench import machine

    found: dict[str, Any] = dict(machine.package_versions())
    try:
        found["locality-workbench"] = importlib.metadata.version("locality-workbench")
    except importlib.metadata.PackageNotFoundError:
        found["locality-workbench"] = None
    found["git"] = _git_revision()
    return found


def _git_revision() -> str | None:
    if not (ROOT / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if changed.stdout.strip() else "")


def default_out() -> Path:
    """``build/bench/<hostname>-<YYYYmmdd-HHMMSS>``."""
    return OUT / f"{socket.gethostname()}-{datetime.datetime.now():%Y%m%d-%H%M%S}"


def run_all(
    planned: Sequence[Planned],
    out: Path,
    *,
    size: str | None = None,
    workers: int | None = None,
    limit: Callable[[Planned], float] = time_limit,
    stderr: TextIO | None = None,
) -> dict[str, Any]:
    """Run ``planned`` in order, each in its own process, write ``out/results.json`` and
    ``out/results.html``, and return the results. ``size``: the size asked for (None: each its own)."""
    stderr = sys.stderr if stderr is None else stderr
    out.mkdir(parents=True, exist_ok=True)
    expected = sum(p.expected_s for p in planned)
    say = lambda line: print(f"bench all: {line}", file=stderr, flush=True)  # noqa: E731
    count = f"{len(planned)} benchmark{'s' if len(planned) != 1 else ''}"
    say(f"{count}, expected about {duration(expected)} on 2 cores; results in {out}")
    results: dict[str, Any] = {
        "size": size,
        "workers": workers,
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_s": None,
        "machine": machine_record(),
        "versions": versions(),
        "benchmarks": [],
    }
    started = time.perf_counter()
    for number, one in enumerate(planned, 1):
        say(f"{number}/{len(planned)} {one.name} at size {one.size} (expected about {duration(one.expected_s)})")
        record = run_one(one, workers, limit(one), stderr)
        results["benchmarks"].append(record)
        _write_json(results, out)  # what finished is kept, even if the run is stopped before the end
        say(f"{one.name}: {record['status']} in {duration(record['wall_s'])}" + _goal_count(record))
    results["wall_s"] = round(time.perf_counter() - started, 3)
    write(results, out)
    return results


def write(results: Mapping[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.html`` into ``out``; return their paths."""
    return _write_json(results, out), write_page(results, out / "results.html")


def _write_json(results: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    data = out / "results.json"
    data.write_text(json.dumps(strict_json(results), indent=2, default=str, allow_nan=False) + "\n")
    return data


def strict_json(value: Any) -> Any:
    """``value`` with every NaN or infinity (a figure that could not be had) as None: strict JSON,
    which other tools than Python's can read."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _goal_count(record: Mapping[str, Any]) -> str:
    report = of_record(record)
    if report is None:
        return f" ({record['error']})"
    return f", {report.met}/{len(report.goals)} goals met"


def failed(results: Mapping[str, Any]) -> list[str]:
    """The benchmarks that failed or ran out of time."""
    return [b["name"] for b in results["benchmarks"] if b["status"] != "ok"]


SUITE_COLUMNS = (
    Column("benchmark", "name", "<18"),
    Column("mechanism", "mechanism", "<26"),
    Column("size", "size", "<5"),
    Column("wall", "wall_s", ">6.0f", "s"),
    Column("goals met", "goals_met", "<10"),
    Column("status", "status"),
)


def table_lines(results: Mapping[str, Any]) -> list[str]:
    """The results for people: a row per benchmark (mechanism, wall time, goals met), then every goal."""
    lines = [
        f"bench all on {results['machine']['hostname']} ({results['machine']['cpu']}, "
        f"{results['machine']['logical_cores']} cores), size {results['size'] or 'each its own'}, "
        f"workers {results['workers'] or 'each its own'}, {duration(results['wall_s'])} in all",
        "",
    ]
    reports = [of_record(b) for b in results["benchmarks"]]
    met = [None if report is None else f"{report.met}/{len(report.goals)}" for report in reports]
    lines += table(SUITE_COLUMNS, [{**b, "goals_met": m} for b, m in zip(results["benchmarks"], met)])
    for b, report in zip(results["benchmarks"], reports):
        lines += ["", f"{b['name']}:"]
        lines += [f"  {describe(g)}" for g in (report.goals if report else ())] or [f"  {b['status']}: {b['error']}"]
    return lines


# -- results files ---------------------------------------------------------------------------------
MAX_FILE_BYTES = 8 * 2**20  # a results file of every benchmark is a few hundred KiB
MAX_DEPTH = 64  # the deepest nesting of a results file (a benchmark's report included); bench all writes < 10
_ESCAPE = re.compile(r"\\.", re.DOTALL)  # a backslash and what it escapes (in JSON: only inside a string)
_JSON_STRING = re.compile(r'"[^"]*"')  # a string once its escapes are gone
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # an opening bracket +1, a closing one -1 (int8)


class ResultsError(ValueError):
    """A file that is not a results file as ``bench all`` writes it. The message is one line: the file,
    the field (``benchmarks[0].report.goals[1].threshold``), what is wrong with it and what to do. A ValueError,
    as :func:`load` raised before, so callers that catch ValueError for a bad file keep working."""


class _Literal(str):
    """A number as the file wrote it, where it is not finite or not within ``MAX_NUMBER`` (``1e400``,
    ``NaN``, ``Infinity``, an integer of hundreds of digits): refused by :func:`_refuse_literal`."""


class _Wrong(Exception):
    """One field of a results file is wrong: where (its path) and what."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where} {what}")


def load(path: str | Path) -> dict[str, Any]:
    """A results file written by ``bench all``, checked in full before anything reads it (it may have
    been edited, cut short or crafted: it is untrusted): its size and nesting bounded, every number
    finite and within ``MAX_NUMBER``, every field of its shape with its type, every text that the page,
    the site or ``bench compare`` shows free of control characters; each benchmark's report read by
    :meth:`Report.from_json` (its version, its goals' figures as floats and their ``met`` worked out
    again from figure and threshold). What it returns can be shown and
    compared without another check. ``FileNotFoundError`` for no file; :class:`ResultsError` (one line
    naming the file and the field) for anything else wrong, an unreadable file included."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{_shown_path(path)}: no such file (a results.json written by 'workbench bench all')")
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ResultsError(
            f"{_shown_path(path)}: cannot read it ({error.strerror or error}): give a results.json you can read"
        ) from None
    try:
        results = _parse(data)
        _check_shape(results)
    except _Wrong as wrong:
        raise ResultsError(
            f"{_shown_path(path)} is not a results file of 'workbench bench all': {wrong}; "
            "give one it wrote, as it wrote it (or run it again)"
        ) from None
    return results


def _shown_path(path: Path) -> str:
    """The path as one line (a name with a line break is shown quoted, its controls escaped)."""
    text = str(path)
    return repr(text) if CONTROL.search(text) else text


def _parse(data: bytes) -> Any:
    """The JSON of a results file, refused before parsing when larger than ``MAX_FILE_BYTES`` or nested
    deeper than ``MAX_DEPTH`` (which would exhaust the parser's recursion); a number that is not finite
    or not within ``MAX_NUMBER`` (``NaN``, ``Infinity``, ``1e400``, an integer of hundreds of digits,
    which Python's int() refuses past 4300) is kept as the file wrote it, a :class:`_Literal`, and
    refused with its field's path (the path is looked for only then: a good file is not walked)."""
    if len(data) > MAX_FILE_BYTES:
        raise _Wrong("the file", f"is larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Wrong("the file", f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    # counted in linear time, whatever the text: escapes go, then strings, then all but brackets
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", _ESCAPE.sub("", text))).encode()
    steps = np.frombuffer(brackets.translate(_DEPTH_STEP), dtype=np.int8)
    if int(np.cumsum(steps, dtype=np.int64).max(initial=0)) > MAX_DEPTH:
        raise _Wrong("the file", f"is nested deeper than {MAX_DEPTH} levels")
    literals: list[_Literal] = []

    def literal(token: str) -> _Literal:
        literals.append(_Literal(token))
        return literals[-1]

    def integer(digits: str) -> int | _Literal:
        value = int(digits) if len(digits) <= 30 else None
        return value if value is not None and abs(value) <= MAX_NUMBER else literal(digits)

    def real(digits: str) -> float | _Literal:
        value = float(digits)
        return value if is_figure(value) else literal(digits)

    try:
        document = json.loads(text, parse_int=integer, parse_float=real, parse_constant=literal)
    except ValueError as error:  # JSONDecodeError included
        raise _Wrong("the file", f"is not JSON ({str(error).splitlines()[0]})") from None
    except RecursionError:  # not reached: the count above is at least the depth the parser reaches
        raise _Wrong("the file", f"is nested deeper than {MAX_DEPTH} levels") from None
    if literals:
        _refuse_literal(document)
    return document


def _field(path: tuple[Any, ...]) -> str:
    """A field's path as people read it: ``benchmarks[0].report.goals[1].threshold``."""
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        elif key.isidentifier():
            text += f".{key}" if text else key
        else:
            text += f"[{key[:40]!r}]"
    return text or "the file"


def _refuse_literal(document: Any) -> None:
    """Raise for the first :class:`_Literal` of ``document`` (in the file's order), naming its field.
    Walked with a stack of its own, not recursion."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(document, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            stack.extend(reversed([(v, (*where, k)) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(v, (*where, i)) for i, v in enumerate(value)]))
        elif isinstance(value, _Literal):
            shown = value if len(value) <= 40 else f"{value[:20]}... ({len(value)} characters)"
            raise _Wrong(_field(where), f"is {shown}, not a finite number within ±{MAX_NUMBER:.3g}")


def _text(value: Any, *where: Any, optional: bool = False) -> None:
    """The field at ``where`` is text the page may show (:func:`text_problem`), or None if ``optional``."""
    if optional and value is None:
        return
    wrong = text_problem(value)
    if wrong:
        raise _Wrong(_field(where), "is missing (or null), not text" if value is None else wrong)


def _number(value: Any, *where: Any, optional: bool = False, least: float = 0, integer: bool = False) -> None:
    """The field at ``where`` is a number (an integer if ``integer``) of at least ``least``, or None if
    ``optional`` (finite and within ``MAX_NUMBER`` already: :func:`_parse` saw to that)."""
    if optional and value is None:
        return
    if not is_number(value) or (integer and not isinstance(value, int)) or value < least:
        kind = "an integer" if integer else "a number"
        said = "missing (or null)" if value is None else f"{value!r:.40}"
        raise _Wrong(_field(where), f"is {said}, not {kind} of at least {least:g}")


# the fields bench all always writes (size, workers, wall_s and a benchmark's error as null where unknown)
RESULTS_FIELDS = ("size", "workers", "started", "wall_s", "machine", "versions", "benchmarks")
BENCHMARK_FIELDS = ("name", "mechanism", "size", "wall_s", "status", "error", "report")


def _present(mapping: dict[str, Any], fields: Sequence[str], *where: Any) -> None:
    """Every one of ``fields`` is in ``mapping`` (null, where a field may be, is written, not left out)."""
    missing = [field for field in fields if field not in mapping]
    if missing:
        raise _Wrong(_field((*where, missing[0])), "is missing")


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def _mapping(value: Any, *where: Any) -> dict[str, Any]:
    """The field at ``where``, which is a JSON object."""
    if not isinstance(value, dict):
        said = "missing (or null)" if value is None else _JSON_KINDS.get(type(value), "not JSON")
        raise _Wrong(_field(where), f"is {said}, not a JSON object")
    return value


def _check_shape(results: Any) -> None:
    """Every field that the page, the site or ``bench compare`` reads, of its type, its text shown."""
    results = _mapping(results, *())
    _present(results, RESULTS_FIELDS)
    machine = _mapping(results.get("machine"), "machine")
    for key in ("hostname", "cpu"):
        _text(machine.get(key), "machine", key)
    _text(machine.get("tier_directory"), "machine", "tier_directory", optional=True)
    _number(machine.get("logical_cores"), "machine", "logical_cores")
    _number(machine.get("memory_total"), "machine", "memory_total")
    caches = machine.get("caches")
    if isinstance(caches, list):
        for i, cache in enumerate(caches):
            _mapping(cache, "machine", "caches", i)
            _number(cache.get("level"), "machine", "caches", i, "level", integer=True)
            _text(cache.get("type"), "machine", "caches", i, "type")
            _number(cache.get("size"), "machine", "caches", i, "size")
    else:  # "unreadable: why", or none
        _text(caches, "machine", "caches", optional=True)
    for name, version in _mapping(results.get("versions"), "versions").items():
        _text(name, "versions", name)
        _text(version, "versions", name, optional=True)
    _text(results.get("started"), "started")
    _text(results.get("size"), "size", optional=True)
    _number(results.get("workers"), "workers", optional=True, least=1, integer=True)
    _number(results.get("wall_s"), "wall_s", optional=True)  # None: stopped before its end
    benchmarks = results.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise _Wrong("benchmarks", "is not a list of benchmarks")
    for i, b in enumerate(benchmarks):
        b = _mapping(b, "benchmarks", i)
        _present(b, BENCHMARK_FIELDS, "benchmarks", i)
        for key in ("name", "mechanism", "size", "status"):
            _text(b.get(key), "benchmarks", i, key)
        if b["status"] not in STATUSES:
            raise _Wrong(_field(("benchmarks", i, "status")), f"is {b['status'][:40]!r}, not one of {STATUSES}")
        _number(b.get("wall_s"), "benchmarks", i, "wall_s")
        _text(b.get("error"), "benchmarks", i, "error", optional=b["status"] == "ok")
        if b["status"] != "ok":
            if b["report"] is not None:
                raise _Wrong(_field(("benchmarks", i, "report")), f"is there, but the benchmark {b['status']}")
            continue
        try:  # the report's own shape: its model reads it (its goals' figures as floats, met worked out again)
            b["report"] = Report.from_json(b["report"]).to_json()
        except ReportError as error:
            raise _Wrong(f"{_field(('benchmarks', i, 'report'))}.{error.field}", error.what) from None


def finished(results: Mapping[str, Any]) -> bool:
    """Whether the run went to its end (a run stopped before it keeps what finished, without ``wall_s``)."""
    return results.get("wall_s") is not None


def _goals_by_key(results: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    reports = [(b["name"], of_record(b)) for b in results["benchmarks"]]
    return {(name, g["goal"]): g for name, report in reports if report for g in report.goals}


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Each goal of both results (matched by benchmark and goal text): A, B, the change in %, the
    noise (the larger of the two runs'), and a verdict: "better" / "worse" when the change exceeds
    the noise, "within noise" otherwise; ``flip`` says "met -> not met" (or back). Goals found in one
    file only are listed apart."""
    goals_a, goals_b = _goals_by_key(a), _goals_by_key(b)
    rows = [_compared(key, goals_a[key], goals_b[key]) for key in goals_a if key in goals_b]
    return {
        "rows": rows,
        "only_a": [{"benchmark": k[0], "goal": k[1]} for k in goals_a if k not in goals_b],
        "only_b": [{"benchmark": k[0], "goal": k[1]} for k in goals_b if k not in goals_a],
    }


def _compared(key: tuple[str, str], ga: Mapping[str, Any], gb: Mapping[str, Any]) -> dict[str, Any]:
    measured_a, measured_b = ga["measured"], gb["measured"]
    known = [n for n in (ga.get("noise"), gb.get("noise")) if n is not None]
    noise = max(known) if known else None
    change = None
    if math.isfinite(measured_a) and math.isfinite(measured_b):
        if measured_a != 0:
            change = (measured_b - measured_a) / abs(measured_a)
        else:  # from nothing (no growth, no CPU): any figure is all change, and none is no change
            change = 0.0 if measured_b == 0 else math.copysign(math.inf, measured_b)
    if change is None:
        verdict = "no figure"
    elif noise is not None and abs(change) <= noise:
        verdict = "within noise"
    elif change == 0:
        verdict = "unchanged"
    else:
        verdict = "better" if (change > 0) == (gb["better"] == "higher") else "worse"
        if noise is None:
            verdict += ", noise unknown"
    flip = None
    if ga["met"] != gb["met"]:
        flip = "not met -> met" if gb["met"] else "met -> not met"
    return {
        "benchmark": key[0],
        "goal": key[1],
        "a": measured_a,
        "b": measured_b,
        "unit": gb.get("unit", ""),
        "change_pct": None if change is None else change * 100,
        "noise_pct": None if noise is None else noise * 100,
        "verdict": verdict,
        "flip": flip,
    }


def compare_lines(comparison: Mapping[str, Any], a_name: str = "A", b_name: str = "B") -> list[str]:
    """The comparison for people: a line per goal, then the goals of one file only."""
    lines = [f"A = {a_name}", f"B = {b_name}", ""]
    for r in comparison["rows"]:
        change = "n/a" if r["change_pct"] is None else f"{r['change_pct']:+.1f} %".replace("inf %", "inf (from 0)")
        noise = "unknown" if r["noise_pct"] is None else f"±{r['noise_pct']:.1f} %"
        flip = f"; {r['flip']}" if r["flip"] else ""
        lines.append(
            f"{r['benchmark']}: {r['goal']}: A {r['a']:.3g}{r['unit']}, B {r['b']:.3g}{r['unit']}, "
            f"change {change}, noise {noise}: {r['verdict']}{flip}"
        )
    for side, name in (("only_a", "A"), ("only_b", "B")):
        if comparison[side]:
            lines += ["", f"only in {name}:"] + [f"  {g['benchmark']}: {g['goal']}" for g in comparison[side]]
    return lines

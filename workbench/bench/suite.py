"""Every benchmark in one run (``workbench bench all``), its results file, and two runs compared.

Each benchmark runs in a process of its own (``python -m workbench.cli bench NAME --json``): a
benchmark that crashes, hangs or leaks takes only itself down, and its time limit can be enforced by
killing its process group (the Dask workers it started included). Its progress lines (stderr) are
passed through as they come; its report (stdout) is kept whole. The run writes one file,
``results.json``::

    {"size", "workers", "started", "wall_s", "machine", "versions",
     "benchmarks": [{"name", "mechanism", "size", "wall_s", "status", "error", "goals", "report"}]}

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

import psutil

from workbench.bench.goals import check_goals, goal_met, is_number
from workbench.bench.page import write_page
from workbench.bench.progress import duration

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
    size on 2 cores, and whether it takes ``--workers``."""

    name: str
    mechanism: str
    size: str
    expected_s: float
    takes_workers: bool

    def command(self, workers: int | None = None) -> list[str]:
        """The command line that runs it, its report as JSON on stdout."""
        command = [sys.executable, "-m", "workbench.cli", "bench", self.name, "--json", "--size", self.size]
        if workers is not None and self.takes_workers:
            command += ["--workers", str(workers)]
        return command


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
    if record["status"] != "ok":
        record["error"] += _clean_segments(before)
    return record


def _outcome(
    planned: Planned, status: str, returncode: int | None, output: str, tail: list[str], limit_s: float
) -> dict[str, Any]:
    """The record's status, error, goals and report from how the process ended and what it printed."""
    last = next((line for line in reversed(tail) if line.strip()), "")
    if status == "timed out":  # where it got to: its last progress line
        where = next((line for line in reversed(tail) if line.startswith(f"bench {planned.name}: ")), last)
        return _failure("timed out", f"stopped after its time limit of {limit_s:.0f} s; last line: {where}")
    if status == "failed":
        return _failure("failed", f"exit status {returncode}: {last or 'nothing on stderr'}")
    try:
        report = json.loads(output)
        goals = report["goals"]
        check_goals(planned.name, goals)
    except (json.JSONDecodeError, TypeError, KeyError) as error:
        return _failure("failed", f"its output is not a report with goals ({type(error).__name__}: {error})")
    except ValueError as error:
        return _failure("failed", str(error))
    return {"status": "ok", "error": None, "goals": goals, "report": report}


def _failure(status: str, error: str) -> dict[str, Any]:
    return {"status": status, "error": error, "goals": [], "report": None}


# -- every benchmark -------------------------------------------------------------------------------
def machine_record() -> dict[str, Any]:
    """:func:`workbench.machine.describe`, the medium under the tier directory and the CPU's caches."""
    from workbench import machine
    from workbench.lab.node_locality import read_caches
    from workbench.memory import tiers

    info = machine.describe()
    try:
        info["tier_directory"] = tiers.medium(tiers.default_directory("mapped")).describe()
    except tiers.TierError as error:
        info["tier_directory"] = f"unusable: {error}"
    try:
        caches = read_caches()
    except ValueError as error:  # a malformed sysfs file: said, not guessed
        info["caches"] = f"unreadable: {error}"
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
    if record["status"] != "ok":
        return f" ({record['error']})"
    return f", {sum(g['met'] for g in record['goals'])}/{len(record['goals'])} goals met"


def failed(results: Mapping[str, Any]) -> list[str]:
    """The benchmarks that failed or ran out of time."""
    return [b["name"] for b in results["benchmarks"] if b["status"] != "ok"]


def table_lines(results: Mapping[str, Any]) -> list[str]:
    """The results for people: a row per benchmark (mechanism, wall time, goals met), then every goal."""
    from workbench.bench.goals import describe

    lines = [
        f"bench all on {results['machine']['hostname']} ({results['machine']['cpu']}, "
        f"{results['machine']['logical_cores']} cores), size {results['size'] or 'each its own'}, "
        f"workers {results['workers'] or 'each its own'}, {duration(results['wall_s'])} in all",
        "",
        f"{'benchmark':<18} {'mechanism':<26} {'size':<5} {'wall':>7}  {'goals met':<10} status",
    ]
    for b in results["benchmarks"]:
        met = f"{sum(g['met'] for g in b['goals'])}/{len(b['goals'])}" if b["status"] == "ok" else "-"
        lines.append(
            f"{b['name']:<18} {b['mechanism']:<26} {b['size']:<5} {b['wall_s']:>6.0f}s  {met:<10} {b['status']}"
        )
    for b in results["benchmarks"]:
        lines += ["", f"{b['name']}:"]
        lines += [f"  {describe(g)}" for g in b["goals"]] or [f"  {b['status']}: {b['error']}"]
    return lines


# -- results files ---------------------------------------------------------------------------------
def load(path: str | Path) -> dict[str, Any]:
    """A results file written by ``bench all``, checked field by field (it may have been edited or
    cut short: it is untrusted), each goal's ``met`` worked out again from its figure and threshold;
    ``FileNotFoundError`` / ``PermissionError`` / ``ValueError`` say what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a results.json written by 'workbench bench all')")
    try:
        results = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"{path} is not JSON ({error}): give a results.json written by 'workbench bench all'"
        ) from None
    problem = _results_problem(results)
    if problem:
        raise ValueError(f"{path} is not a results file of 'workbench bench all': {problem}")
    for b in results["benchmarks"]:
        check_goals(b["name"], b["goals"], where=str(path))
        for g in b["goals"]:
            if g["measured"] is None:  # a figure that could not be had: NaN, which strict JSON writes as null
                g["measured"] = math.nan
            g["met"] = goal_met(g["measured"], g["threshold"], g["better"])
            if g.get("noise") is not None and not math.isfinite(g["noise"]):
                g["noise"] = None
    return results


def _results_problem(results: Any) -> str | None:
    """What is wrong with a results file's fields other than its goals (None: nothing)."""
    if not isinstance(results, dict):
        return "not a JSON object"
    machine, versions = results.get("machine"), results.get("versions")
    if not isinstance(machine, dict) or not all(isinstance(machine.get(k), str) for k in ("hostname", "cpu")):
        return "no machine with a hostname and a cpu"
    if not all(_is_number(machine.get(k)) for k in ("logical_cores", "memory_total")):
        return "the machine's logical_cores or memory_total is not a number"
    if not isinstance(versions, dict) or not isinstance(results.get("started"), str):
        return "no versions, or no start time"
    if results.get("wall_s") is not None and not _is_number(results["wall_s"]):
        return "its wall_s is not a number"
    benchmarks = results.get("benchmarks")
    if not isinstance(benchmarks, list):
        return "no list of benchmarks"
    for b in benchmarks:
        fields = ("name", "mechanism", "size", "status")
        if not isinstance(b, dict) or not all(isinstance(b.get(k), str) for k in fields):
            return f"a benchmark without {', '.join(fields)}"
        if b["status"] not in STATUSES or not _is_number(b.get("wall_s")) or not isinstance(b.get("goals"), list):
            return f"benchmark {b['name'][:40]!r} has no status of {STATUSES}, wall_s or list of goals"
    return None


def _is_number(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def finished(results: Mapping[str, Any]) -> bool:
    """Whether the run went to its end (a run stopped before it keeps what finished, without ``wall_s``)."""
    return results.get("wall_s") is not None


def _goals_by_key(results: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(b["name"], g["goal"]): g for b in results["benchmarks"] for g in b["goals"]}


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

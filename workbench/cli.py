"""The ``workbench`` command: benchmarks, the dataset catalogue and the machine description.

Every command is declared once, in :data:`COMMANDS` (its name, help, arguments and handler), and every
benchmark once, in :data:`BENCHMARKS` (its name, help, the ``workbench.bench`` module that runs it and
the arguments its ``run`` takes); :func:`build_parser` makes the parser from them. A mistake in what
the user typed is a :class:`UsageError`: one line on stderr, exit status 2. A reader of stdout that
stops early (``workbench datasets | head``) ends the command quietly, as it ends ``cat``: status 141
(128 + SIGPIPE), no traceback. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import select
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # the handlers import what they run when they run: `workbench --help` stays fast
    from workbench.lab.runner import Declared

Handler = Callable[[argparse.Namespace], int]
Check = Callable[[str, Any], None]  # (flag, parsed value): raises UsageError when the value is wrong


class UsageError(Exception):
    """A mistake in the command line or in what it names (a bad value, no such application, a missing
    file): ``main`` prints it as one line and exits with status 2, without a traceback."""


@dataclass(frozen=True)
class Argument:
    """One command-line argument: the flags and keywords ``add_argument`` takes, and a check of its value."""

    flags: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    check: Check | None = None  # run on the parsed value (when it is not None) before the handler

    @property
    def dest(self) -> str:
        """The attribute the value is parsed into (argparse's rule: ``dest=``, else the first long flag)."""
        if "dest" in self.options:
            return self.options["dest"]
        flag = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return flag.lstrip("-").replace("-", "_")


def arg(*flags: str, check: Check | None = None, **options: Any) -> Argument:
    """An :class:`Argument`, written as ``add_argument`` is called."""
    return Argument(flags, options, check)


@dataclass(frozen=True)
class Command:
    """One ``workbench`` command: its handler gets the parsed arguments and returns the exit status.
    A group (``bench``) has subcommands instead of a handler; ``subcommand`` names the one chosen."""

    name: str
    help: str
    handler: Handler | None = None
    arguments: tuple[Argument, ...] = ()
    subcommands: tuple[Command, ...] = ()
    subcommand: str = ""


@dataclass(frozen=True)
class Benchmark:
    """One ``workbench bench`` benchmark: ``workbench.bench.<module>.run(**arguments)`` makes the report (a
    :class:`workbench.bench.report.Report`), the module's ``format_report`` prints it for people (``--json``
    prints its JSON, which ``bench all`` reads back)."""

    name: str
    help: str
    module: str  # workbench.bench.<module> runs it, or a dotted module path (see module_path)
    mechanism: str  # what it measures, as the brief names the mechanisms (bench all groups by it)
    # seconds per size on 2 cores, said up front: timed_sizes as measured (AMD EPYC Zen 5, 32 MiB L3), others estimated
    expected_s: Mapping[str, float]
    arguments: tuple[Argument, ...] = ()
    timed_sizes: tuple[str, ...] = ("ci", "lab")
    # ``workbench.bench.<module>.why_not`` when the module has one: why this machine cannot run it (one
    # line, read when bench all plans; None: it can)
    may_skip: bool = False
    # why ``bench all`` leaves it out unless its --only names it (one line; None: bench all runs it)
    only_when_named: str | None = None

    def why_not(self, named: bool = False) -> str | None:
        """Why ``bench all`` leaves the benchmark out (it says so in one line), or None: this machine cannot
        run it, or it runs long and ``--only`` did not name it (``named``)."""
        if self.only_when_named and not named:
            return self.only_when_named
        if not self.may_skip:
            return None
        return importlib.import_module(self.module_path).why_not()

    @property
    def module_path(self) -> str:
        """The module that runs it: ``workbench.bench.<module>``, or ``module`` itself when it is a dotted
        path (the lessons' run times live with the course, in ``workbench.teach``, which may import
        ``bench`` but not the other way round)."""
        return self.module if "." in self.module else f"workbench.bench.{self.module}"

    @property
    def default_size(self) -> str:
        """The size it runs at when none is given (its ``--size`` argument's default)."""
        return next(a.options["default"] for a in self.arguments if a.flags == ("--size",))


# -- checks and argument types -----------------------------------------------------------------
def at_least(minimum: int, why: str = "") -> Check:
    """A check that a number (or every number of a list) is at least ``minimum``; ``why`` says why."""

    def check(flag: str, value: int | Sequence[int]) -> None:
        if isinstance(value, Sequence):
            if any(v < minimum for v in value):
                counts = "positive counts" if minimum == 1 else f"counts of at least {minimum}"
                raise UsageError(f"{flag} takes {counts}{why}, got {list(value)}")
        elif value < minimum:
            raise UsageError(f"{flag} must be at least {minimum}{why}, got {value}")

    return check


def positive_seconds(flag: str, value: float) -> None:
    """A check that a number of seconds is finite and positive (``float`` reads "nan" and "inf" too)."""
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} must be a positive, finite number of seconds, got {value}")


def one_of(names: Callable[[], Iterable[str]], what: str) -> Check:
    """A check that every name of a list argument is one of ``names()`` (read only when the argument is given)."""

    def check(flag: str, given: Sequence[str]) -> None:
        from workbench.names import did_you_mean

        known = list(names())
        for name in given:
            if name not in known:
                guess = f" ({hint})" if (hint := did_you_mean(name, known)) else ""
                raise UsageError(f"{flag}: no {what} {name!r}{guess}; they are {', '.join(known)}")

    return check


def a_folder_of_lessons(flag: str, given: str) -> None:
    """A check that ``given`` is a folder holding lesson notebooks (``NN-name.ipynb``)."""
    from workbench.teach import run_times as lessons

    folder = Path(given)
    if not folder.is_dir() or not lessons.notebooks(directory=folder):
        raise UsageError(f"{flag} {given}: no lessons (NN-name.ipynb) there; name the folder that holds them")


def comma_separated(text: str) -> list[str]:
    """The names of a comma-separated argument (``--apps histogram1d,kmeans``)."""
    return text.split(",")


def _names_in(module: str, attribute: str) -> Callable[[], Iterable[str]]:
    """The names ``workbench.bench.<module>.<attribute>`` holds, read when called (the module is imported then)."""
    return lambda: getattr(importlib.import_module(f"workbench.bench.{module}"), attribute)


def _lesson_numbers() -> list[str]:
    from workbench.teach import run_times as lessons

    return lessons.numbers()


def _kernel_names() -> list[str]:
    from workbench.bench import kernels

    return kernels.names()


@contextlib.contextmanager
def _from_user_input(*errors: type[Exception]) -> Iterator[None]:
    """Errors of these types raised in the block were caused by what the user typed: they become UsageErrors.

    Only wrap the calls that read the user's input (a lookup by name, a file named on the command line):
    the same types raised anywhere else are bugs and keep their traceback."""
    try:
        yield
    except errors as error:
        raise UsageError(str(error)) from error


# -- handlers ------------------------------------------------------------------------------------
def _bench(args: argparse.Namespace) -> int:
    """Run the benchmark ``args.benchmark`` with the arguments given (unset ones keep its run's defaults)."""
    from workbench.bench.progress import Progress

    benchmark = BENCHMARKS[args.benchmark]
    module = importlib.import_module(benchmark.module_path)
    options = {a.dest: getattr(args, a.dest) for a in benchmark.arguments if getattr(args, a.dest) is not None}
    progress = Progress(benchmark.name)
    if benchmark.why_not(named=True) is None:  # one that skips says only why, in its report (named: its own command)
        # a module's compile_estimate(**options): what compiling adds now (numba's cache may hold it all)
        extra = module.compile_estimate(**options) if hasattr(module, "compile_estimate") else None
        estimated = args.size not in benchmark.timed_sizes
        progress.expect(args.size, benchmark.expected_s[args.size], estimated=estimated, extra=extra)
    report = module.run(**options, progress=progress)
    if args.json and report.skipped:  # stdout is the report: the person watching reads why on stderr
        progress.say(f"skipped: {report.skipped}")
    print(json.dumps(report.to_json(), indent=2, default=str) if args.json else module.format_report(report))
    return 0


def _planned(args: argparse.Namespace) -> list[Any]:
    """The benchmarks ``bench all`` runs, in BENCHMARKS' order: ``--only``'s, at ``--size`` or each its own default."""
    from workbench.bench.suite import Planned

    planned = []
    for name, benchmark in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        if reason := benchmark.why_not(named=bool(args.only) and name in args.only):
            print(f"bench all: {name} left out: {reason}", file=sys.stderr)
            continue
        size = args.size or benchmark.default_size
        takes_workers = any(a.flags == ("--workers",) for a in benchmark.arguments)
        expected, options = benchmark.expected_s[size], ()
        if name == "lessons" and args.lessons:  # the lessons named: their share of every lesson's time
            expected = expected * len(args.lessons) / len(_lesson_numbers())
            options = ("--only", ",".join(args.lessons))
        planned.append(Planned(name, benchmark.mechanism, size, expected, takes_workers, options))
    return planned


def _bench_all(args: argparse.Namespace) -> int:
    """Run every benchmark (or ``--only``'s), each in its own process; write results.json and results.html."""
    from workbench.bench import suite

    out = Path(args.out) if args.out else suite.default_out()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: name a directory for results.json and results.html")
    try:
        out.mkdir(parents=True, exist_ok=True)  # a place that cannot hold the results fails now, not at the end
    except OSError as error:
        raise UsageError(f"--out {out}: cannot make the directory ({error.strerror}): name another") from None
    # a benchmark runs in a session of its own, out of reach of the terminal's Ctrl-C and of a kill
    # of this process: both become an exception here, and the running benchmark is stopped with it
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    results = suite.run_all(_planned(args), out, size=args.size, workers=args.workers)
    print(json.dumps(results, indent=2, default=str) if args.json else "\n".join(suite.table_lines(results)))
    print(f"bench all: wrote {out / 'results.json'} and {out / 'results.html'}", file=sys.stderr)
    failed = suite.failed(results)
    if failed:
        print(f"bench all: {', '.join(failed)} did not finish (see their errors above)", file=sys.stderr)
    return 1 if failed else 0


def _bench_compare(args: argparse.Namespace) -> int:
    """Each goal of two results files: A, B, the change and the noise, better / worse / within noise."""
    from workbench.bench import suite

    with _from_user_input(OSError, ValueError):  # a missing or unreadable file, or not a results file
        a, b = suite.load(args.a), suite.load(args.b)
    comparison = suite.compare(a, b)
    print(json.dumps(comparison, indent=2) if args.json else "\n".join(suite.compare_lines(comparison, args.a, args.b)))
    return 0


def _parse_params(items: Sequence[str]) -> dict[str, list[int]]:
    """``--param NAME=V1,V2`` options as a grid (integers); errors name the parameter and the value."""
    grid: dict[str, list[int]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if not name or not values:
            raise UsageError(f"--param takes NAME=V1,V2,... (integers), got {item!r}")
        try:
            grid[name] = [int(v) for v in values.split(",")]
        except ValueError:
            raise UsageError(f"--param {name}: values must be integers separated by commas, got {values!r}") from None
    return grid


def _output_directory(out: str | None, app: str) -> Path:
    """The ``--out`` directory, created now: a path that cannot hold results fails before the run, not after."""
    from datetime import datetime

    path = Path(out or f"runs/{app}-{datetime.now():%Y%m%d-%H%M%S}")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file: name a directory for the results (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".workbench-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(
            f"--out {path} cannot hold the results ({error.strerror or error}): choose a writable directory"
        ) from None
    return path


def _declared(args: argparse.Namespace) -> Declared:
    """The experiment ``workbench run`` names, declared (so checked: application, variants, baseline,
    parameters, size, the strategies' needs) before any cluster starts. ``--param`` replaces those
    parameters of the size's grid and keeps the others."""
    from workbench.apps import registry
    from workbench.lab.runner import declare

    overrides = _parse_params(args.param or ())
    with _from_user_input(ValueError):  # the registry's and the runner's errors for what was typed
        application = registry.get(args.app)
        grid = {**application.grids.get(args.size, {}), **overrides} if overrides else None
        return declare(application, args.variants, args.size, grid, args.repeat, args.baseline)


def _run(args: argparse.Namespace) -> int:
    import workbench
    from workbench.lab.runner import run_declared

    declared = _declared(args)
    if args.cluster is not None:
        from workbench.runtime.clusters import kind_named

        with _from_user_input(ValueError):  # a kind nobody registered: refused before a directory is made
            kind_named(args.cluster)
    out = _output_directory(args.out, args.app)
    # The store variants use the session's own store (a throwaway one, or the cluster's when it has
    # one), closed with the session: see workbench.runtime.store.store_for.
    with _from_user_input(ValueError):  # a cluster that cannot start here: no sbatch, a bad $WORKBENCH_SLURM_*, ...
        session = workbench.start(cluster=args.cluster, n_workers=args.workers, timeout=args.timeout)
    with session:
        experiment = run_declared(session, declared, seed=args.seed, trace=not args.no_trace, progress=not args.json)
    experiment.save(out)
    table = experiment.stats_table()
    where = f"results, statistics and traces (JSON + Perfetto) in {out}/; 'workbench report {out}' makes an HTML page"
    if args.json:  # stdout stays one JSON document; the table goes to stderr for the person watching
        print((out / "results.json").read_text())
        print(f"{table}\n\n{where}", file=sys.stderr)
    else:
        print(f"{table}\n\n{where}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from workbench.lab.runner import Experiment
    from workbench.viz.report import write_report

    if args.output and not Path(args.output).parent.is_dir():
        raise UsageError(f"--output {args.output}: the directory {Path(args.output).parent} does not exist")
    with _from_user_input(FileNotFoundError, ValueError):  # no results.json there, or not an experiment's
        experiment = Experiment.load(args.dir)
    output = Path(args.output) if args.output else Path(args.dir) / "report.html"
    print(write_report(experiment, output))
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from workbench.locality import Report

    if args.html and not Path(args.html).parent.is_dir():
        raise UsageError(f"--html {args.html}: the directory {Path(args.html).parent} does not exist")
    if args.html and Path(args.html).is_dir():
        raise UsageError(
            f"--html {args.html} is a folder: name the page's file, such as {Path(args.html) / 'diagnosis.html'}"
        )
    with _from_user_input(OSError, ValueError):  # no such file, or not an observation or a trace
        report = Report.load(args.trace)
    if args.json:
        print(json.dumps({"counts": report.counts, "findings": [f.as_dict() for f in report.findings]}, indent=2))
    else:
        print(report.text())
    if args.html:
        with _from_user_input(OSError):  # a page where it cannot be written
            page = report.to_html(args.html)
        print(f"page: {page}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _shm(args: argparse.Namespace) -> int:
    from workbench.memory import shm

    if args.action == "clean":
        with _from_user_input(shm.SharedMemoryError):  # --dir is not a segment directory
            removed = shm.clean(args.dir, everything=args.all, prefix=args.prefix)
            kept = [i for i in shm.list_segments(args.dir) if i.name.startswith(args.prefix) and i.mapped_by]
        if args.dir is None:  # and what the default store's killed backends left in its tier directory
            from workbench.memory import tiers

            removed += [f"{name} (a store tier file)" for name in tiers.reclaim_store_files()]
        lines = [f"removed {name}" for name in removed]
        lines += [f"kept {i.name}: in use by process {', '.join(map(str, i.mapped_by))}" for i in kept]
        print("\n".join(lines) or "nothing to remove")
        return 0
    with _from_user_input(shm.SharedMemoryError):
        infos = shm.list_segments(args.dir)
    if args.json:
        print(json.dumps([{**info.__dict__, "path": str(info.path)} for info in infos], indent=2))
        return 0
    if not infos:
        print(f"no workbench segments in {args.dir or shm.SHM_DIR}")
    for info in infos:
        users = ",".join(map(str, info.mapped_by)) or "-"
        lives = ""  # a segment made for an owner process: whether 'shm clean' (and the next start) frees it
        if info.lifetime == "owner":
            lives = "  owner dead: clean removes it" if info.reclaimable else f"  owner {info.owner_pid or 'elsewhere'}"
        print(
            f"{info.name:<48} {info.state:<9} {info.nbytes / 2**20:>9.2f} MiB  {str(info.shape or ''):<16} "
            f"{info.dtype or '':<10} age {info.age_s:>7.0f} s  used by {users}{lives}"
        )
    return 0


def _store(args: argparse.Namespace) -> int:
    from workbench.names import printable
    from workbench.runtime.store import catalogue_file

    # no catalogue in --dir, --dir a file, the catalogue unreadable, or not a store's (a bad row, a FIFO)
    with _from_user_input(FileNotFoundError, NotADirectoryError, PermissionError, ValueError):
        listing = catalogue_file.read(args.dir)
    if args.json:
        print(json.dumps(listing, indent=2))
    elif not listing["objects"]:
        print(f"the store in {listing['directory']} holds no objects")
    else:
        for o in listing["objects"]:
            where = "disk" if o["disk_path"] else "memory only (lost when its cluster stopped)"
            aliases = ", ".join(printable(a) for a in o["aliases"])
            print(
                f"{printable(o['oid'][:12])} v{o['version']}{' (current)' if o['current'] else ''}  "
                f"{printable(o['class_label']):<40} {o['nbytes'] / 1e6:>9.3f} MB  {where}  {aliases}"
            )
    return 0


def _datasets(args: argparse.Namespace) -> int:
    from workbench import datasets

    rows = datasets.describe(args.size)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        for r in rows:
            arrays = ", ".join(f"{k} {v}" for k, v in r["arrays"].items())
            print(f"{r['dataset']:<10} {r['nbytes'] / 1e6:>10.1f} MB  {arrays}\n{'':<10} {r['description']}")
    return 0


def _machine(args: argparse.Namespace) -> int:
    from workbench import machine

    print(json.dumps(machine.describe(), indent=2) if args.json else "\n".join(machine.summary_lines()))
    return 0


def _settings(args: argparse.Namespace) -> int:
    from workbench import settings

    rows = settings.described()
    invalid = [row["name"] for row in rows if row["error"]]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            value = "(not set)" if row["value"] is None else repr(row["value"])
            print(f"{row['name']} = {value}\n    {row['meaning']}")
            if row["error"]:
                print(f"    INVALID: {row['error']}")
    if invalid:
        print(f"invalid: {', '.join(invalid)}: set them as the lines above say, or unset them", file=sys.stderr)
        return 1
    return 0


def _course(args: argparse.Namespace) -> int:
    from workbench.teach import course

    with _from_user_input(course.CourseError):
        done = course.copy_course(args.to, args.source) if args.source else course.copy_course(args.to)
    print(done.summary())
    return 0


def _bundle(args: argparse.Namespace) -> int:
    from workbench import bundle

    with _from_user_input(bundle.BundleError):
        if args.check:
            made = bundle.read(args.dir)
            print(f"{made.directory}: {len(made.files)} wheels for Python {made.python}, as its manifest lists")
            return 0
        python = bundle.check_python(args.python or bundle.this_python())
        made = bundle.write(
            args.dir, python, args.platform, args.extra or (), args.constraint, announce=lambda m: print(m, flush=True)
        )
    print(f"{made.directory}: {len(made.files)} wheels for Python {made.python}; on the node, in this folder:")
    print(f"  {made.install_command(f'python{made.python}').replace(str(made.directory), '.')}")
    print(f"(see {made.directory / bundle.INSTALL})")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from workbench import doctor

    if args.learners is not None and args.learners < 1:
        raise UsageError(f"--learners must be a positive number of learners, got {args.learners}")
    return 0 if doctor.report(doctor.run(quick=args.quick, learners=args.learners)) else 1


# -- the tables ----------------------------------------------------------------------------------
SIZES = ("ci", "lab", "full")
JSON = arg("--json", action="store_true", help="print the full report as JSON")


def _size(default: str, what: str = "") -> Argument:
    return arg(
        "--size", choices=SIZES, default=default, help=f"problem size (default {default}){'; ' + what if what else ''}"
    )


def _repeat(default: int, what: str, dest: str = "repeats") -> Argument:
    return arg("--repeat", dest=dest, type=int, default=default, check=at_least(1), help=f"{what} (default {default})")


def _workers(help: str = "worker processes (default: one per core)", minimum: int = 1, why: str = "") -> Argument:
    return arg("--workers", type=int, check=at_least(minimum, why), help=help)


def _leave_out(name: str, help: str) -> Argument:
    """``--no-NAME``: the benchmark's run gets ``NAME=False``."""
    return arg(f"--no-{name}", dest=name.replace("-", "_"), action="store_false", help=help)


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "kernels",
            "kernel throughput vs numpy and the streaming-read bandwidth",
            "kernels",
            "numba kernels",
            {"ci": 2, "lab": 15, "full": 60},
            (
                _size("lab", "ci: 1/64 of the inputs, a smoke run, not a measurement; full: 4x"),
                _repeat(5, "timed calls per kernel (median is reported)"),
                arg(
                    "--only",
                    nargs="+",
                    metavar="KERNEL",
                    check=one_of(_kernel_names, "kernel"),
                    help="measure only these kernels",
                ),
            ),
        ),
        Benchmark(
            "shm",
            "one read-only array to every worker: workbench RRO vs Dask, files and peers",
            "shm",
            "node-shared memory (RRO)",
            {"ci": 15, "lab": 30, "full": 120},
            (
                _size("lab", "the array: 32 MB at ci, 256 MB at lab, 1 GB at full"),
                arg("--size-mb", type=int, check=at_least(1), help="array size in MB (default: the size's)"),
                arg("--tasks", type=int, default=10, check=at_least(1), help="tasks per worker (default 10)"),
                _workers(),
                arg(
                    "--only",
                    nargs="+",
                    metavar="WAY",
                    check=one_of(_names_in("shm", "PEERS"), "way"),
                    help="measure only these ways",
                ),
                _leave_out("table1", "leave out k-means at Table I's point with the most dimensions (RRO vs files)"),
            ),
        ),
        Benchmark(
            "locality",
            "what observing a computation costs: workbench.locality.observe on the seed applications vs unobserved",
            "locality",
            "locality diagnosis",
            {"ci": 30, "lab": 120, "full": 900},
            (
                _size("ci", "lab and full: bigger data, where the observation's fixed cost weighs less"),
                _repeat(7, "runs of each, observed and unobserved alternated (the median is reported)"),
                arg(
                    "--apps",
                    type=comma_separated,
                    check=one_of(_names_in("locality", "APPS"), "application"),
                    help="comma-separated seed applications (default: histogram,kmeans,knn)",
                ),
                _workers(),
            ),
        ),
        Benchmark(
            "splitter",
            "one task per block vs rechunk vs SplIter at 1, 48, 200 blocks per core",
            "splitter",
            "SplIter",
            {"ci": 35, "lab": 50, "full": 300},
            (
                _size("lab"),
                _repeat(3, "timed runs per variant"),
                arg("--blocks-per-core", type=int, nargs="+", default=[1, 48, 200], check=at_least(1)),
                _workers(),
            ),
        ),
        Benchmark(
            "store",
            "active store: null-call latency vs Dask and dataClay; active vs non-active apps",
            "store",
            "active object store",
            {"ci": 30, "lab": 200, "full": 600},
            (
                _size("lab"),
                _repeat(3, "timed runs per variant"),
                arg("--calls", type=int, default=2000, check=at_least(1), help="null calls per path (default 2000)"),
                _leave_out("dataclay", "skip the dataClay peer even when it is installed"),
                _workers(),
            ),
        ),
        Benchmark(
            "store-scale",
            "active store at 10^2..10^5 objects and 10^3..10^4 blocks: registration, locations, latency",
            "store_scale",
            "active object store",
            {"ci": 10, "lab": 30, "full": 120},
            (
                _size("lab"),
                arg("--objects", type=int, nargs="+", check=at_least(1), help="object counts (default: the size's)"),
                arg("--blocks", type=int, nargs="+", check=at_least(1), help="block counts (default: the size's)"),
                _workers(),
            ),
        ),
        Benchmark(
            "tiers",
            "memory tiers: bandwidth hot/cold, the ch. 6 applications per tier, result modes, dynamic placement",
            "tiers",
            "memory tiers",
            {"ci": 45, "lab": 150, "full": 1800},
            (
                _size("lab"),
                arg(
                    "--apps",
                    type=comma_separated,
                    check=one_of(_names_in("tiers", "APPS"), "tier application"),
                    help="comma-separated applications (default: the size's; lab leaves out matmul)",
                ),
                arg(
                    "--variants",
                    type=comma_separated,
                    check=one_of(_names_in("tiers", "VARIANTS"), "tier configuration"),
                    help="comma-separated tier configurations (default: the size's; lab runs nine)",
                ),
                _workers(),
            ),
        ),
        Benchmark(
            "channels",
            "array channels: ping-pong vs eager vs mpi4py, steady-state allocation, PRK kernels",
            "channels",
            "in-place array channels",
            {"ci": 20, "lab": 45, "full": 300},
            (
                _size("lab"),
                _workers("worker processes (default 2)", 2, " (one per ping-pong rank)"),
                _leave_out("mpi", "leave out the mpi4py peer"),
                _leave_out("two-nodes", "leave out the two-simulated-nodes (socket) run"),
            ),
        ),
        Benchmark(
            "balance",
            "SplIter partitions that rebalance (split-balanced) vs split, blocks, rechunk under imbalance",
            "balance",
            "SplIter",
            {"ci": 240, "lab": 600, "full": 1800},
            (
                _size("ci"),
                _repeat(3, "timed runs per variant and scenario"),
                _workers("worker processes (default 2; one core each)", 2, " (balance needs someone to steal from)"),
            ),
        ),
        Benchmark(
            "execution-models",
            "threads vs processes + shared memory (PiP): spawn, first touch, page tables, mmap, applications",
            "execution_models",
            "execution models",
            {"ci": 15, "lab": 30, "full": 300},
            (
                _size("lab"),
                _leave_out("dask", "leave out the Dask workers' spawn times"),
                # given: apps=() (run skips them); not given: unset, so run keeps its own list
                arg(
                    "--no-apps",
                    dest="apps",
                    action="store_const",
                    const=(),
                    help="leave out the applications on clusters",
                ),
                arg("--cores", type=int, check=at_least(1), help="cores for the application clusters (default: all)"),
            ),
        ),
        Benchmark(
            "gpu",
            "GPU memory as a tier: bus pinned vs pageable, device floor, histogram, k-means kept vs copied, store",
            "gpu",
            "memory tiers (GPU)",
            {"ci": 20, "lab": 60, "full": 180},
            (
                _size("lab", "ci: a smoke run, not a measurement; lab: 128 MB of points, 256 MB bus copies"),
                _workers("worker processes of the store part (default: one per core)"),
            ),
            timed_sizes=(),  # no GPU has run it yet: every expected time is an estimate
            may_skip=True,
        ),
        Benchmark(
            "lessons",
            "every lesson's Run All, headless, timed against its budget (the instructor guide's table)",
            "workbench.teach.run_times",
            "the course",
            {"ci": 300, "lab": 1100, "full": 3600},
            (
                _size("ci", "lab: the classroom's size, each lesson's budget 150 s; ci: 60 s"),
                arg(
                    "--only",
                    type=comma_separated,
                    metavar="NN,NN",
                    check=one_of(_lesson_numbers, "lesson"),
                    help="comma-separated lesson numbers (default: every lesson)",
                ),
                arg("--out", help="keep the executed lessons in this directory (default: a temporary one)"),
                arg("--markdown", action="store_true", help="print the instructor guide's table (Markdown)"),
                arg(
                    "--notebooks",
                    dest="notebooks_dir",
                    metavar="DIR",
                    check=a_folder_of_lessons,
                    help="time the lessons in this folder (default: the course's notebooks/), such as your "
                    "edited copy from 'workbench course copy'",
                ),
            ),
            timed_sizes=(),  # not timed on a quiet machine yet (ci: the README's nbval run of the eleven)
            only_when_named="it executes every lesson, for minutes (a quarter of an hour or more at size lab): run "
            "'workbench bench lessons' on its own, or name it in --only",
        ),
    )
}

if {"all", "compare"} & set(BENCHMARKS):  # 'bench all' and 'bench compare' are not benchmarks
    raise ValueError(f"a benchmark may not be named 'all' or 'compare': {sorted({'all', 'compare'} & set(BENCHMARKS))}")

COMMANDS: tuple[Command, ...] = (
    Command(
        "bench",
        "run a benchmark and print ratios against its baseline",
        subcommands=(
            *(Command(b.name, b.help, _bench, (JSON, *b.arguments)) for b in BENCHMARKS.values()),
            Command(
                "all",
                "run every benchmark, each in its own process: results.json and a page of every goal (results.html)",
                _bench_all,
                (
                    arg("--size", choices=SIZES, help="every benchmark's size (default: each its own default)"),
                    arg("--json", action="store_true", help="print results.json instead of the table"),
                    arg("--out", help="directory for results.json and results.html (default build/bench/HOST-TIME)"),
                    _workers("worker processes, for the benchmarks that take --workers (default: each its own)"),
                    arg(
                        "--only",
                        type=comma_separated,
                        check=one_of(lambda: BENCHMARKS, "benchmark"),
                        help="comma-separated benchmarks (default: all of them)",
                    ),
                    arg(
                        "--lessons",
                        type=comma_separated,
                        metavar="NN,NN",
                        check=one_of(_lesson_numbers, "lesson"),
                        help="the lessons benchmark times only these lessons (default: every lesson)",
                    ),
                ),
            ),
            Command(
                "compare",
                "compare two results files of 'bench all': each goal's change, with the noise seen in repeats",
                _bench_compare,
                (arg("a", help="results.json (before)"), arg("b", help="results.json (after)"), JSON),
            ),
        ),
        subcommand="benchmark",
    ),
    Command(
        "run",
        "run an application in variants, repeated, with traces and statistics",
        _run,
        (
            arg("app", help="application name (histogram, ...)"),
            arg("--variants", type=comma_separated, help="comma-separated variants (default: all)"),
            arg(
                "--baseline", help="the variant the others are compared with (default: the app's, else the first named)"
            ),
            _size("ci"),
            _repeat(
                5,
                "timed runs per variant and parameter point, at least: at lab and full more while a comparison "
                "with the baseline is within the noise, up to a bound by size (workbench.lab.runner.MAX_REPEATS)",
                dest="repeat",
            ),
            arg("--param", action="append", metavar="NAME=V1,V2", help="override a grid parameter"),
            arg("--out", help="directory for results and traces (default runs/APP-TIMESTAMP)"),
            arg("--json", action="store_true", help="print results.json instead of the table"),
            _workers("worker processes (default: one per core; with --cluster slurm, those of $WORKBENCH_SLURM_JOBS)"),
            arg(
                "--cluster",
                metavar="KIND",
                help="where the workers run: a cluster kind (local, scheduler, slurm, gateway; default "
                "$WORKBENCH_CLUSTER, else a scheduler at $WORKBENCH_SCHEDULER, else local); slurm submits them "
                "as Slurm jobs set by $WORKBENCH_SLURM_*, gateway asks a dask-gateway (README)",
            ),
            arg("--seed", type=int, default=0),
            arg(
                "--timeout",
                type=float,
                default=120.0,
                check=positive_seconds,
                help="seconds for cluster start-up and each wait",
            ),
            arg("--no-trace", action="store_true", help="skip the traces (a little less overhead)"),
        ),
    ),
    Command(
        "report",
        "write a standalone HTML report of a 'workbench run' directory",
        _report,
        (arg("dir"), arg("--output", help="HTML file (default DIR/report.html)")),
    ),
    Command(
        "diagnose",
        "name the locality problems in a saved observation (report.save) or trace, with evidence and remedies",
        _diagnose,
        (
            arg("trace", help="a file written by workbench.locality's report.save(...), or a workbench trace .json"),
            arg("--html", help="also write the report as one offline HTML page here"),
            arg("--json", action="store_true", help="print the counts and findings as JSON"),
        ),
    ),
    Command(
        "shm",
        "list or clean the workbench's shared-memory segments",
        _shm,
        (
            arg("action", choices=("list", "clean")),
            arg("--dir", help="segment directory (default /dev/shm)"),
            arg("--all", action="store_true", help="clean: also remove complete segments no process uses"),
            arg("--prefix", default="", help="clean: only names starting with this"),
            arg("--json", action="store_true"),
        ),
    ),
    Command(
        "store",
        "list what a store's catalogue holds (read from its SQLite file, no cluster)",
        _store,
        (
            arg("action", choices=("list",)),
            arg(
                "--dir", help="the store directory (default $WORKBENCH_STORE_DIR or ~/.cache/locality-workbench/store)"
            ),
            arg("--json", action="store_true"),
        ),
    ),
    Command("datasets", "list the dataset catalogue", _datasets, (_size("ci"), arg("--json", action="store_true"))),
    Command(
        "machine", "describe this machine and the installed versions", _machine, (arg("--json", action="store_true"),)
    ),
    Command(
        "settings",
        "every environment variable the workbench reads, what it sets, and its value here (exits 1 if one is invalid)",
        _settings,
        (arg("--json", action="store_true"),),
    ),
    Command(
        "course",
        "copy the lessons and the course pages into a folder of yours (a file you have is kept)",
        _course,
        (
            arg("action", choices=("copy",)),
            arg("--to", type=Path, help="the folder (default ~/locality-workbench)"),
            arg("--source", type=Path, help="the checkout to copy from (default: the one the workbench runs from)"),
        ),
    ),
    Command(
        "bundle",
        "write every wheel the workbench needs into a folder, for a node with no package index",
        _bundle,
        (
            arg("dir", help="the folder (created; an earlier bundle in it is replaced, any other files refused)"),
            arg("--python", help="the node's Python version, such as 3.11 (default: this one's)"),
            arg(
                "--platform",
                action="append",
                help="a wheel platform tag of the node, such as manylinux2014_x86_64; repeat it for several "
                "(default: this machine's tags)",
            ),
            arg("--extra", action="append", help="an extra of the project to bundle too, such as gpu (repeatable)"),
            arg("--constraint", help="a pip constraints file: the versions the resolver may choose"),
            arg("--check", action="store_true", help="check an existing bundle's files against its manifest"),
        ),
    ),
    Command(
        "doctor",
        "is this machine ready for the course? each failed check names its fix",
        _doctor,
        (
            arg("--quick", action="store_true", help="skip the checks that start JupyterLab and a Dask cluster"),
            arg("--learners", type=int, help="say whether a class of N learners fits on this machine at size lab"),
        ),
    ),
)


# -- the parser and main -------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the command, what is wrong, where the help is), status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def _add_commands(parser: argparse.ArgumentParser, commands: Sequence[Command], dest: str) -> None:
    chooser = parser.add_subparsers(dest=dest, required=True, metavar=dest.upper())
    for command in commands:
        sub = chooser.add_parser(command.name, help=command.help, description=command.help)
        if command.subcommands:
            _add_commands(sub, command.subcommands, command.subcommand)
            continue
        for argument in command.arguments:
            sub.add_argument(*argument.flags, **argument.options)
        sub.set_defaults(handler=command.handler, arguments=command.arguments)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The ``workbench`` parser, made from ``commands``: a subcommand each (a group's nested under it);
    the parsed namespace carries the chosen command's ``handler`` and ``arguments``."""
    parser = _Parser(prog="workbench", description="Locality Workbench command line.")
    _add_commands(parser, commands, "command")
    return parser


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (``| head`` has read its lines and exited)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, ValueError, OSError):  # stdout is no file (a test's capture), or closed
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``workbench`` command; returns the exit status.

    A user error (argparse's, or a :class:`UsageError`: a bad value, an unknown name, a missing file)
    prints one line and gives status 2; a closed stdout (``| head``) ends it quietly with status 141;
    any other exception is a bug and propagates with its traceback.
    """
    args = build_parser().parse_args(argv)
    try:
        for argument in args.arguments:
            value = getattr(args, argument.dest)
            if argument.check is not None and value is not None:
                argument.check(argument.flags[0], value)
        status = args.handler(args)
        sys.stdout.flush()  # a reader that has gone shows here, not in the interpreter's last flush
        return status
    except UsageError as error:
        print(f"workbench: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        if not _stdout_reader_gone():  # another pipe broke (a worker's, a subprocess's): a bug, with its traceback
            raise
        # Python's documented way: what stdout still buffers goes nowhere, so exiting prints no second error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())

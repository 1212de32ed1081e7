"""The ``workbench`` command: benchmarks, the dataset catalogue and the machine description."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _bench_kernels(args: argparse.Namespace) -> int:
    from workbench.bench import kernels as bench_kernels

    report = bench_kernels.run(quick=args.quick, repeats=args.repeat, only=args.only)
    print(json.dumps(report, indent=2) if args.json else bench_kernels.format_report(report))
    return 0


def _parse_params(items: Sequence[str]) -> dict[str, list[int]]:
    """``--param NAME=V1,V2`` options as a grid (integers); errors name the parameter and the value."""
    grid: dict[str, list[int]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if not name or not values:
            raise ValueError(f"--param takes NAME=V1,V2,... (integers), got {item!r}")
        try:
            grid[name] = [int(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--param {name}: values must be integers separated by commas, got {values!r}") from None
    return grid


def _output_directory(out: str | None, app: str) -> Path:
    """The ``--out`` directory, created now: a path that cannot hold results fails before the run, not after."""
    from datetime import datetime

    path = Path(out or f"runs/{app}-{datetime.now():%Y%m%d-%H%M%S}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} is a file: name a directory for the results (it is created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".workbench-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ValueError(
            f"--out {path} cannot hold the results ({error.strerror or error}): choose a writable directory"
        ) from None
    return path


def _run(args: argparse.Namespace) -> int:
    import tempfile

    import workbench
    from workbench.apps import registry
    from workbench.lab.runner import run_experiment
    from workbench.runtime.store import Store, registered_directory

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    application = registry.get(args.app)
    variants = args.variants.split(",") if args.variants else None
    for name in variants or ():
        application.variant(name)
    grid = None
    if args.param:  # the size's grid, with the parameters named here replaced
        overrides = _parse_params(args.param)
        application.check_parameters(list(overrides))
        grid = {**application.grids[args.size], **overrides}
    out = _output_directory(args.out, args.app)
    with (
        workbench.start(n_workers=args.workers, timeout=args.timeout) as session,
        tempfile.TemporaryDirectory(prefix="workbench-run-store-") as store_directory,
    ):
        # The store variants' data is this run's only: a throwaway store, detached again at the end.
        # A cluster that already has a store (a user's, on a shared scheduler) keeps it: the run
        # uses it and deletes what it placed, as every variant does.
        store = Store(session, store_directory if registered_directory(session) is None else None)
        try:
            experiment = run_experiment(
                session,
                args.app,
                variants=variants,
                size=args.size,
                grid=grid,
                repeats=args.repeat,
                seed=args.seed,
                trace=not args.no_trace,
                progress=not args.json,
                baseline=args.baseline,
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the run's own error is the one to report
                store.close()
            raise
        store.close()
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

    experiment = Experiment.load(args.dir)
    path = write_report(experiment, args.output or Path(args.dir) / "report.html")
    print(path)
    return 0


def _shm(args: argparse.Namespace) -> int:
    from workbench.memory import shm

    if args.action == "clean":
        removed = shm.clean(args.dir, everything=args.all, prefix=args.prefix)
        print("\n".join(f"removed {name}" for name in removed) or "nothing to remove")
        return 0
    infos = shm.list_segments(args.dir)
    if args.json:
        print(json.dumps([{**info.__dict__, "path": str(info.path)} for info in infos], indent=2))
        return 0
    if not infos:
        print(f"no workbench segments in {args.dir or shm.SHM_DIR}")
    for info in infos:
        users = ",".join(map(str, info.mapped_by)) or "-"
        print(
            f"{info.name:<48} {info.state:<9} {info.nbytes / 2**20:>9.2f} MiB  {str(info.shape or ''):<16} "
            f"{info.dtype or '':<10} age {info.age_s:>7.0f} s  used by {users}"
        )
    return 0


def _bench_shm(args: argparse.Namespace) -> int:
    from workbench.bench import shm as bench_shm

    report = bench_shm.run(size_mb=args.size_mb, tasks=args.tasks, workers=args.workers, only=args.only)
    print(json.dumps(report, indent=2) if args.json else bench_shm.format_report(report))
    return 0


def _bench_splitter(args: argparse.Namespace) -> int:
    from workbench.bench import splitter as bench_splitter

    report = bench_splitter.run(
        size=args.size, repeats=args.repeat, blocks_per_core=args.blocks_per_core, workers=args.workers
    )
    print(json.dumps(report, indent=2) if args.json else bench_splitter.format_report(report))
    return 0


def _bench_store(args: argparse.Namespace) -> int:
    from workbench.bench import store as bench_store

    report = bench_store.run(
        size=args.size, repeats=args.repeat, calls=args.calls, dataclay=not args.no_dataclay, workers=args.workers
    )
    print(json.dumps(report, indent=2, default=str) if args.json else bench_store.format_report(report))
    return 0


def _bench_store_scale(args: argparse.Namespace) -> int:
    from workbench.bench import store_scale

    for name in ("objects", "blocks"):
        if any(n < 1 for n in getattr(args, name) or ()):
            raise ValueError(f"--{name} takes positive counts, got {getattr(args, name)}")
    report = store_scale.run(size=args.size, objects=args.objects, blocks=args.blocks, workers=args.workers)
    print(json.dumps(report, indent=2, default=str) if args.json else store_scale.format_report(report))
    return 0


def _bench_tiers(args: argparse.Namespace) -> int:
    from workbench.bench import tiers

    apps = args.apps.split(",") if args.apps else list(tiers.APPS)
    variants = args.variants.split(",") if args.variants else None
    for app in apps:
        if app not in tiers.APPS:
            raise ValueError(f"--apps: no tier application {app!r}; they are {', '.join(tiers.APPS)}")
    for variant in variants or ():
        if variant not in tiers.VARIANTS:
            raise ValueError(f"--variants: no tier configuration {variant!r}; they are {', '.join(tiers.VARIANTS)}")
    report = tiers.run(size=args.size, apps=apps, variants=variants, workers=args.workers)
    print(json.dumps(report, indent=2, default=str) if args.json else tiers.format_report(report))
    return 0


def _bench_execution_models(args: argparse.Namespace) -> int:
    from workbench.bench import execution_models

    report = execution_models.run(
        size=args.size, dask=not args.no_dask, apps=None if args.no_apps else execution_models.APPS, cores=args.cores
    )
    print(json.dumps(report, indent=2, default=str) if args.json else execution_models.format_report(report))
    return 0


def _bench_balance(args: argparse.Namespace) -> int:
    from workbench.bench import balance

    if args.workers is not None and args.workers < 2:
        raise ValueError(f"--workers must be at least 2 (balance needs someone to steal from), got {args.workers}")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {args.repeats}")
    report = balance.run(args.size, args.repeats, args.workers or 2)
    print(json.dumps(report, indent=2, default=str) if args.json else balance.format_report(report))
    return 0


def _bench_channels(args: argparse.Namespace) -> int:
    from workbench.bench import channels

    if args.workers is not None and args.workers < 2:
        raise ValueError(f"--workers must be at least 2 (one per ping-pong rank), got {args.workers}")
    report = channels.run(
        size=args.size,
        workers=args.workers,
        two_nodes=not args.no_two_nodes,
        mpi=not args.no_mpi,
        progress=lambda line: print(f"bench channels: {line}", file=sys.stderr, flush=True),
    )
    print(json.dumps(report, indent=2, default=str) if args.json else channels.format_report(report))
    return 0


def _store(args: argparse.Namespace) -> int:
    from workbench.runtime.store import catalogue_file

    listing = catalogue_file.read(args.dir)
    if args.json:
        print(json.dumps(listing, indent=2))
    elif not listing["objects"]:
        print(f"the store in {listing['directory']} holds no objects")
    else:
        for o in listing["objects"]:
            where = "disk" if o["disk_path"] else "memory only (lost when its cluster stopped)"
            print(
                f"{o['oid'][:12]} v{o['version']}{' (current)' if o['current'] else ''}  {o['class_label']:<40} "
                f"{o['nbytes'] / 1e6:>9.3f} MB  {where}  {', '.join(o['aliases'])}"
            )
    return 0


def _datasets(args: argparse.Namespace) -> int:
    import datasets

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


def _doctor(args: argparse.Namespace) -> int:
    from workbench import doctor

    return 0 if doctor.report(doctor.run(quick=args.quick)) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="Locality Workbench command line.")
    commands = parser.add_subparsers(dest="command", required=True)

    bench = commands.add_parser("bench", help="run a benchmark and print ratios against its baseline")
    benches = bench.add_subparsers(dest="benchmark", required=True)
    k = benches.add_parser("kernels", help="kernel throughput vs numpy and the streaming-read bandwidth")
    k.add_argument("--json", action="store_true", help="print the full report as JSON")
    k.add_argument("--quick", action="store_true", help="1/64 of the input sizes (a smoke run, not a measurement)")
    k.add_argument("--repeat", type=int, default=5, help="timed calls per kernel (median is reported)")
    k.add_argument("--only", nargs="+", metavar="KERNEL", help="measure only these kernels")
    k.set_defaults(func=_bench_kernels)
    bs = benches.add_parser("shm", help="one read-only array to every worker: workbench RRO vs Dask, files and peers")
    bs.add_argument("--json", action="store_true")
    bs.add_argument("--size-mb", type=int, default=256, help="array size in MB (default 256)")
    bs.add_argument("--tasks", type=int, default=10, help="tasks per worker (default 10)")
    bs.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    bs.add_argument("--only", nargs="+", metavar="WAY", help="measure only these ways")
    bs.set_defaults(func=_bench_shm)
    bsp = benches.add_parser("splitter", help="one task per block vs rechunk vs SplIter at 1, 48, 200 blocks per core")
    bsp.add_argument("--json", action="store_true")
    bsp.add_argument("--size", choices=("ci", "lab", "full"), default="lab")
    bsp.add_argument("--repeat", type=int, default=3)
    bsp.add_argument("--blocks-per-core", type=int, nargs="+", default=[1, 48, 200])
    bsp.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    bsp.set_defaults(func=_bench_splitter)

    bst = benches.add_parser(
        "store", help="active store: null-call latency vs Dask and dataClay; active vs non-active apps"
    )
    bst.add_argument("--json", action="store_true")
    bst.add_argument("--size", choices=("ci", "lab", "full"), default="lab")
    bst.add_argument("--repeat", type=int, default=3)
    bst.add_argument("--calls", type=int, default=2000, help="null calls per path (default 2000)")
    bst.add_argument("--no-dataclay", action="store_true", help="skip the dataClay peer even when it is installed")
    bst.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    bst.set_defaults(func=_bench_store)

    bss = benches.add_parser(
        "store-scale", help="active store at 10^2..10^5 objects and 10^3..10^4 blocks: registration, locate, latency"
    )
    bss.add_argument("--json", action="store_true")
    bss.add_argument("--size", choices=("ci", "lab", "full"), default="lab")
    bss.add_argument("--objects", type=int, nargs="+", help="object counts (default: the size's)")
    bss.add_argument("--blocks", type=int, nargs="+", help="block counts (default: the size's)")
    bss.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    bss.set_defaults(func=_bench_store_scale)

    bti = benches.add_parser(
        "tiers", help="memory tiers: bandwidth hot/cold, the ch. 6 applications per tier, result placement, dynamic"
    )
    bti.add_argument("--json", action="store_true")
    bti.add_argument("--size", choices=("ci", "lab", "full"), default="lab")
    bti.add_argument("--apps", help="comma-separated applications (default: histogram1d,kmeans,matadd,matmul)")
    bti.add_argument("--variants", help="comma-separated tier configurations (default: all)")
    bti.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    bti.set_defaults(func=_bench_tiers)

    bch = benches.add_parser(
        "channels", help="array channels: ping-pong vs eager vs mpi4py, steady-state allocation, PRK kernels"
    )
    bch.add_argument("--json", action="store_true")
    bch.add_argument("--size", choices=("ci", "lab", "full"), default="lab")
    bch.add_argument("--workers", type=int, help="worker processes (default 2)")
    bch.add_argument("--no-mpi", action="store_true", help="leave out the mpi4py peer")
    bch.add_argument("--no-two-nodes", action="store_true", help="leave out the two-simulated-nodes (socket) run")
    bch.set_defaults(func=_bench_channels)
    bba = benches.add_parser(
        "balance", help="SplIter partitions that rebalance (split-balanced) vs split, blocks, rechunk under imbalance"
    )
    bba.add_argument("--json", action="store_true")
    bba.add_argument("--size", choices=("ci", "lab", "full"), default="ci")
    bba.add_argument("--repeats", type=int, default=3)
    bba.add_argument("--workers", type=int, help="worker processes (default 2; one core each)")
    bba.set_defaults(func=_bench_balance)

    bem = benches.add_parser(
        "execution-models",
        help="threads vs processes + shared memory (PiP): spawn, first touch, page tables, mmap, applications",
    )
    bem.add_argument("--json", action="store_true")
    bem.add_argument("--size", choices=("ci", "lab", "full"), default="lab")
    bem.add_argument("--no-dask", action="store_true", help="leave out the Dask workers' spawn times")
    bem.add_argument("--no-apps", action="store_true", help="leave out the applications on clusters")
    bem.add_argument("--cores", type=int, help="cores for the application clusters (default: all)")
    bem.set_defaults(func=_bench_execution_models)

    r = commands.add_parser("run", help="run an application in variants, repeated, with traces and statistics")
    r.add_argument("app", help="application name (histogram, ...)")
    r.add_argument("--variants", help="comma-separated variants (default: all)")
    r.add_argument(
        "--baseline", help="the variant the others are compared with (default: the app's, else the first named)"
    )
    r.add_argument("--size", choices=("ci", "lab", "full"), default="ci")
    r.add_argument("--repeat", type=int, default=5, help="timed runs per variant and parameter point")
    r.add_argument("--param", action="append", metavar="NAME=V1,V2", help="override a grid parameter")
    r.add_argument("--out", help="directory for results and traces (default runs/APP-TIMESTAMP)")
    r.add_argument("--json", action="store_true", help="print results.json instead of the table")
    r.add_argument("--workers", type=int, help="local worker processes (default: one per core)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--timeout", type=float, default=120.0, help="seconds for cluster start-up and each wait")
    r.add_argument("--no-trace", action="store_true", help="skip the traces (a little less overhead)")
    r.set_defaults(func=_run)

    rep = commands.add_parser("report", help="write a standalone HTML report of a 'workbench run' directory")
    rep.add_argument("dir")
    rep.add_argument("--output", help="HTML file (default DIR/report.html)")
    rep.set_defaults(func=_report)

    sh = commands.add_parser("shm", help="list or clean the workbench's shared-memory segments")
    sh.add_argument("action", choices=("list", "clean"))
    sh.add_argument("--dir", help="segment directory (default /dev/shm)")
    sh.add_argument("--all", action="store_true", help="clean: also remove complete segments no process uses")
    sh.add_argument("--prefix", default="", help="clean: only names starting with this")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=_shm)

    st = commands.add_parser(
        "store", help="list what a store's catalogue holds (read from its SQLite file, no cluster)"
    )
    st.add_argument("action", choices=("list",))
    st.add_argument(
        "--dir", help="the store directory (default $WORKBENCH_STORE_DIR or ~/.cache/locality-workbench/store)"
    )
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_store)

    d = commands.add_parser("datasets", help="list the dataset catalogue")
    d.add_argument("--size", choices=("ci", "lab", "full"), default="ci")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_datasets)

    m = commands.add_parser("machine", help="describe this machine and the installed versions")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_machine)
    doc = commands.add_parser("doctor", help="is this machine ready for the course? each failed check names its fix")
    doc.add_argument("--quick", action="store_true", help="skip the checks that start JupyterLab and a Dask cluster")
    doc.set_defaults(func=_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``workbench`` command; returns the exit status (errors print one line, status 2)."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError, FileNotFoundError, RuntimeError) as error:
        print(f"workbench: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

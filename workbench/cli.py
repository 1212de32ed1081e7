"""The ``workbench`` command: benchmarks, the dataset catalogue and the machine description."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _bench_kernels(args: argparse.Namespace) -> int:
    from workbench.bench import kernels as bench_kernels

    report = bench_kernels.run(quick=args.quick, repeats=args.repeat, only=args.only)
    print(json.dumps(report, indent=2) if args.json else bench_kernels.format_report(report))
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

    d = commands.add_parser("datasets", help="list the dataset catalogue")
    d.add_argument("--size", choices=("ci", "lab", "full"), default="ci")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_datasets)

    m = commands.add_parser("machine", help="describe this machine and the installed versions")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_machine)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError) as error:
        print(f"workbench: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

import importlib
import inspect
import json
import subprocess
import sys

import pytest

from workbench import cli
from workbench.bench import kernels as bench_kernels
from workbench.bench.report import Report


def _workbench(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )


def test_bench_kernels_json_reports_every_kernel_with_its_ratios():
    result = _workbench("bench", "kernels", "--size", "ci", "--repeat", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = Report.from_json(json.loads(result.stdout))  # the model, as bench all reads it back
    names = {row["kernel"] for row in report.rows}
    assert names == {case.name for case in bench_kernels._cases()}
    for row in report.rows:
        assert row["numba_s"] > 0 and row["numpy_s"] > 0 and row["first_call_s"] > 0
        assert row["ratio_numpy"] == row["numpy_s"] / row["numba_s"]
        assert row["fraction_of_stream"] > 0
    assert report.parts["stream_GBps"]["all_threads"] > 0 and report.counts["numba_threads"] >= 1
    assert [g["goal"].split(":")[0] for g in report.goals] == ["histogramdd", "histogramdd", "histogram1d"]


def test_bench_table_names_goals():
    result = _workbench("bench", "kernels", "--size", "ci", "--repeat", "1", "--only", "histogram1d")
    assert result.returncode == 0, result.stderr
    assert (
        "histogram1d" in result.stdout and "goal: histogram1d: numba on all threads faster than numpy" in result.stdout
    )
    # the time said up front counts numba's compile exactly when the run then compiled the kernel
    (row,) = [line.split() for line in result.stdout.splitlines() if line.startswith("histogram1d ")]
    said = result.stderr.splitlines()[0]
    assert said.startswith("bench kernels: size ci, expected about 2 s on 2 cores"), said
    assert ("compile 1 kernel" in said or "and 1 kernel" in said) == row[1].endswith("c"), (said, row)


def test_unknown_kernel_is_a_clear_error():
    result = _workbench("bench", "kernels", "--only", "histogram")
    assert result.returncode == 2
    assert "--only: no kernel 'histogram'" in result.stderr and "histogramdd" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """`workbench datasets --size full | head`: stdout's reader has gone before the first line; the
    command stops as `cat` does (status 141, nothing on stderr), not with a BrokenPipeError traceback."""
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: every write breaks the pipe
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", "datasets"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_broken_pipe_that_is_not_stdout_keeps_its_traceback(monkeypatch, capsys):
    from workbench import datasets

    def broken(size):
        raise BrokenPipeError(32, "a worker's pipe")

    monkeypatch.setattr(datasets, "describe", broken)
    with pytest.raises(BrokenPipeError, match="a worker's pipe"):  # a bug, not a reader that stopped
        cli.main(["datasets"])


def test_a_benchmark_this_machine_cannot_run_says_why_once(monkeypatch, capsys):
    from workbench.bench import gpu

    monkeypatch.setattr(gpu, "why_not", lambda: "no device here (a test)")
    assert cli.main(["bench", "gpu", "--size", "ci"]) == 0
    out, err = capsys.readouterr()
    assert (out + err).count("no device here (a test)") == 1 and "expected about" not in err, (out, err)
    assert cli.main(["bench", "gpu", "--size", "ci", "--json"]) == 0  # stdout is the report: why on stderr
    out, err = capsys.readouterr()
    assert json.loads(out)["skipped"] == "no device here (a test)"
    assert err == "bench gpu: skipped: no device here (a test)\n"


def test_the_expected_time_adds_numbas_compile_of_what_its_cache_does_not_hold(monkeypatch):
    import io

    from workbench.bench.progress import Progress

    monkeypatch.setattr(bench_kernels, "_cached", lambda dispatcher: False)
    seconds, what = bench_kernels.compile_estimate("ci", 1, None)
    assert seconds == pytest.approx(sum(bench_kernels.COMPILE_S.values()))
    assert what.startswith("for numba to compile the streaming read and 9 kernels")
    assert bench_kernels.compile_estimate("ci", 1, ["prk_reduce"])[0] == pytest.approx(3.0)
    said = io.StringIO()
    Progress("kernels", said).expect("ci", 2, extra=(29.2, what))
    assert said.getvalue() == f"bench kernels: size ci, expected about 2 s on 2 cores, plus about 29 s {what}\n"
    monkeypatch.setattr(bench_kernels, "_cached", lambda dispatcher: True)
    assert bench_kernels.to_compile() == [] and bench_kernels.compile_estimate("ci", 1, None) is None
    assert set(bench_kernels.COMPILE_S) == {bench_kernels.STREAM, *bench_kernels.names()}


def test_kernel_ratios_keep_their_digits_and_name_where_numpy_is_faster():
    assert [bench_kernels.ratio_text(r) for r in (0.0078125, 0.176, 6.694, 34.61, 1911.4)] == [
        "0.00781",
        "0.176",
        "6.69",
        "34.6",
        "1911",
    ]
    row = dict(
        kernel="matrix_add",
        first_call_s=0.03,
        first_call_compiled=False,
        numba_s=0.0256,
        numba_one_thread_s=0.0256,
        numpy_s=0.0002,
        GBps=0.24,
        ratio_numpy=0.0002 / 0.0256,
        ratio_numpy_one_thread=0.0002 / 0.0256,
        fraction_of_stream=0.35,
    )
    report = Report(
        "kernels",
        "ci",
        repeats=1,
        counts={"numba_threads": 2},
        parts={"stream_GBps": dict(all_threads=0.7, one_thread=0.6, bytes=2.0**24)},
        rows=[row, {**row, "kernel": "histogramdd", "ratio_numpy": 6.69, "ratio_numpy_one_thread": 9.0}],
        machine={},
    )
    text = bench_kernels.format_report(report)
    (line,) = [t for t in text.splitlines() if t.startswith("matrix_add ")]
    assert line.split()[6:8] == ["0.00781", "0.00781"], line  # x numpy, x numpy 1t: not 0.0
    assert "numpy faster than numba on all threads: matrix_add 128x" in text and "histogramdd 6.69x" not in text


def test_datasets_and_machine_commands():
    listing = _workbench("datasets", "--size", "full")
    assert listing.returncode == 0 and "kmeans" in listing.stdout and "MB" in listing.stdout
    info = json.loads(_workbench("machine", "--json").stdout)
    assert info["logical_cores"] >= 1 and "numba" in info["packages"]


def test_run_store_variants_json(tmp_path):
    result = _workbench(
        "run",
        "knn",
        "--variants",
        "active,non-active,active-split",
        "--size",
        "ci",
        "--repeat",
        "2",
        "--param",
        "blocks_per_worker=4",
        "--json",
        "--out",
        str(tmp_path / "knn"),
        "--workers",
        "2",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {r["variant"] for r in document["results"]} == {"active", "non-active", "active-split"}
    assert document["baseline"] == "active"  # the first named: knn's own baseline (blocks) was not asked for


def test_run_tier_variants_json(tmp_path):
    result = _workbench(
        "run",
        "matadd",
        "--variants",
        "dram,mapped,non-active",
        "--size",
        "ci",
        "--repeat",
        "2",
        "--json",
        "--out",
        str(tmp_path / "matadd"),
        "--workers",
        "2",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {r["variant"] for r in document["results"]} == {"dram", "mapped", "non-active"}
    assert document["baseline"] == "dram"


def test_store_list_reads_the_catalogue_without_a_cluster(tmp_path):
    import numpy as np

    import workbench
    from workbench.runtime.store import ArrayBlock, Store

    with workbench.start(n_workers=1, timeout=60) as session:
        store = Store(session, tmp_path)
        kept = store.make_persistent(ArrayBlock(np.zeros(1000)), alias="zeros")
        kept.flush()
        store.make_persistent(ArrayBlock(np.ones(10)), alias="ones")
        store.close()
    result = _workbench("store", "list", "--dir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert sorted(a for o in listing["objects"] for a in o["aliases"]) == ["ones", "zeros"]
    text = _workbench("store", "list", "--dir", str(tmp_path)).stdout
    assert "zeros" in text and "memory only (lost when its cluster stopped)" in text
    missing = _workbench("store", "list", "--dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "holds no store catalogue" in missing.stderr


def _bad_inputs(tmp_path):
    """(arguments, words the error must contain): each fails at once, before any cluster starts."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    not_an_experiment = tmp_path / "not-an-experiment"
    not_an_experiment.mkdir()
    (not_an_experiment / "results.json").write_text('{"something": "else"}')
    corrupt = tmp_path / "corrupt-store"
    corrupt.mkdir()
    (corrupt / "catalogue.sqlite").write_bytes(b"this is not an SQLite database" * 100)
    return [
        (["run", "histogram", "--workers", "0"], ["--workers must be at least 1"]),
        (["run", "histogram", "--repeat", "0"], ["--repeat must be at least 1"]),
        (["run", "histogram", "--out", str(a_file)], ["is a file", "name a directory"]),
        (["run", "histogram", "--param", "nosuch=1"], ["no parameter 'nosuch'", "blocks_per_worker"]),
        (["run", "histogram", "--param", "blocks_per_workers=1"], ["did you mean 'blocks_per_worker'"]),
        (["run", "histogram", "--param", "blocks_per_worker=abc"], ["--param blocks_per_worker", "integers", "'abc'"]),
        (["run", "histogram", "--param", "blocks_per_worker"], ["NAME=V1,V2"]),
        (["run", "histogram", "--variants", "blocks,nosuch"], ["no variant 'nosuch'"]),
        (["run", "histogrm"], ["no application 'histogrm'", "did you mean 'histogram'"]),
        (["run", "histogram", "--cluster", "nosuch"], ["no cluster kind 'nosuch'", "gateway"]),
        (["run", "histogram", "--timeout", "nan"], ["--timeout must be a positive, finite number of seconds", "nan"]),
        (["run", "histogram", "--timeout", "-1"], ["--timeout must be a positive"]),
        (["bench", "tiers", "--apps", "histogram,kmeans"], ["no tier application 'histogram'", "histogram1d"]),
        (["bench", "tiers", "--variants", "dram,nvm"], ["no tier configuration 'nvm'", "mapped"]),
        (["bench", "channels", "--workers", "1"], ["--workers must be at least 2"]),
        (["report", str(tmp_path)], ["holds no results.json"]),
        (["report", str(not_an_experiment)], ["is not a workbench experiment", "metadata"]),
        (["report", str(not_an_experiment), "--output", str(tmp_path / "nowhere" / "r.html")], ["does not exist"]),
        (["shm", "list", "--dir", str(a_file)], ["is not a directory"]),
        (["store", "list", "--dir", str(corrupt)], ["not a workbench store catalogue"]),
    ]


def test_bad_input_fails_at_once_with_a_message_not_a_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad_inputs = _bad_inputs(tmp_path)
    for arguments, words in bad_inputs:
        try:
            status = cli.main(arguments)
        except SystemExit as exit:  # argparse's own errors
            status = exit.code
        out, err = capsys.readouterr()
        assert status == 2, (arguments, out, err)
        assert "Traceback" not in err, (arguments, err)
        for word in words:
            assert word.lower() in err.lower(), (arguments, word, err)
    assert not (tmp_path / "runs").exists(), "a run refused at once still made its results directory"
    # the same through the command a user types: its exit status and stderr, in a process of its own
    arguments, words = bad_inputs[0]
    result = _workbench(*arguments, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert all(word.lower() in result.stderr.lower() for word in words), result.stderr


def _leaves(commands=cli.COMMANDS, words=()):
    """(the words that name it, command) for every command that runs something, groups' subcommands included."""
    for command in commands:
        if command.subcommands:
            yield from _leaves(command.subcommands, (*words, command.name))
        else:
            yield (*words, command.name), command


def test_every_command_in_the_table_has_a_handler_help_and_is_listed_by_help(capsys):
    assert {name for name, _ in _leaves()} >= {("run",), ("bench", "kernels"), ("bench", "balance"), ("doctor",)}
    for words, command in _leaves():
        assert callable(command.handler) and command.help, words
        args = cli.build_parser().parse_args([*words, *_positionals(command)])
        assert args.handler is command.handler and args.arguments == command.arguments
    for group in [(), *((c.name,) for c in cli.COMMANDS if c.subcommands)]:
        with pytest.raises(SystemExit) as exit:
            cli.main([*group, "--help"])
        assert exit.value.code == 0
        listing = " ".join(capsys.readouterr().out.split())  # argparse wraps long help lines
        commands = next((c.subcommands for c in cli.COMMANDS if (c.name,) == group), cli.COMMANDS)
        for command in commands:
            assert f"{command.name} {' '.join(command.help.split())}" in listing, (group, command.name)


def _positionals(command):
    """A valid value for each positional argument of ``command`` (its first choice, else any word)."""
    return [a.options.get("choices", ["x"])[0] for a in command.arguments if not a.flags[0].startswith("-")]


@pytest.mark.parametrize("name", list(cli.BENCHMARKS))
def test_each_benchmark_parses_and_its_arguments_are_its_runs(name):
    args = cli.build_parser().parse_args(["bench", name])
    assert args.benchmark == name and args.handler is cli._bench and args.json is False
    benchmark = cli.BENCHMARKS[name]
    module = importlib.import_module(benchmark.module_path)
    assert callable(module.format_report)
    assert inspect.signature(module.run).return_annotation in ("Report", Report)  # every run returns the model
    parameters = inspect.signature(module.run).parameters
    for argument in benchmark.arguments:  # each reaches run as a keyword of the same name
        assert argument.dest in parameters, (name, argument.flags)
    assert "progress" in parameters and "size" in parameters  # every run shows progress and takes a size
    assert set(benchmark.expected_s) == set(cli.SIZES) and benchmark.default_size in cli.SIZES
    assert benchmark.expected_s[benchmark.default_size] <= 300  # the default fits 5 minutes on 2 cores


def test_repeat_is_the_one_spelling():
    flags = {flag for _, command in _leaves() for argument in command.arguments for flag in argument.flags}
    assert "--repeat" in flags and "--repeats" not in flags
    for words, command in _leaves():
        if any("--repeat" in a.flags for a in command.arguments):
            args = cli.build_parser().parse_args([*words, *_positionals(command), "--repeat", "7"])
            assert 7 in (getattr(args, "repeat", None), getattr(args, "repeats", None)), words


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["bench", "balance", "--repeats", "2"], ["unrecognized arguments: --repeats"]),
        (["bench", "balance", "--repeat", "0"], ["--repeat must be at least 1, got 0"]),
        (["bench", "balance", "--workers", "1"], ["--workers must be at least 2", "steal"]),
        (["bench", "store-scale", "--objects", "10", "0"], ["--objects takes positive counts", "[10, 0]"]),
        (["bench", "tiers", "--apps", "histogram1d,kmean"], ["no tier application 'kmean'", "did you mean 'kmeans'"]),
        (["bench", "shm", "--only", "dask", "rya"], ["--only: no way 'rya'", "did you mean 'ray'"]),
        (["bench", "kernels", "--repeat", "abc"], ["workbench bench kernels:", "invalid int value: 'abc'", "--help"]),
        (["bench", "nosuch"], ["invalid choice: 'nosuch'", "execution-models"]),
        (["run", "histogram", "--workers", "0"], ["--workers must be at least 1"]),
        (["run", "histogram", "--baseline", "nosuch"], ["no variant 'nosuch'"]),
        (["run", "kmeans", "--variants", "activ,non-active"], ["no variant 'activ'", "(did you mean 'active'?)"]),
        ([], ["required: COMMAND"]),
    ],
)
def test_a_bad_argument_is_one_line_on_stderr_and_status_2(arguments, words, capsys):
    try:
        status = cli.main(arguments)  # fails before any cluster starts or any benchmark runs
    except SystemExit as exit:  # argparse's own errors
        status = exit.code
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.parametrize(
    ("arguments", "patch", "error"),
    [
        (["machine", "--json"], ("workbench.machine", "describe"), KeyError),
        (["bench", "kernels", "--size", "ci"], ("workbench.bench.kernels", "run"), ValueError),
        (["datasets"], ("workbench.datasets", "describe"), RuntimeError),
    ],
)
def test_an_internal_error_in_a_handler_propagates_with_its_traceback(arguments, patch, error, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise error("a bug deep inside")

    monkeypatch.setattr(importlib.import_module(patch[0]), patch[1], broken)
    with pytest.raises(error, match="a bug deep inside") as raised:
        cli.main(arguments)
    assert raised.traceback[-1].name == "broken"  # the traceback reaches where it was raised
    said = capsys.readouterr().err  # nothing but a benchmark's progress (its expected time) came before
    assert "workbench:" not in said and all(line.startswith("bench ") for line in said.splitlines())


def test_an_internal_error_prints_a_traceback_from_the_command():
    script = (
        "import sys, workbench.machine as m\n"
        "def broken(): raise KeyError('no such field')\n"
        "m.describe = broken\n"
        "from workbench.cli import main\n"
        "sys.exit(main(['machine', '--json']))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" in result.stderr and "KeyError: 'no such field'" in result.stderr


def test_one_suggestion_for_every_mistyped_name():
    from workbench.names import did_you_mean

    assert did_you_mean("activ", ["active", "non-active", "dram"]) == "did you mean 'active'?"
    assert did_you_mean("countr", ["counter", "counted", "zeros"], n=3) == "did you mean 'counter' or 'counted'?"
    assert did_you_mean("zzz", ["active"]) == "" and did_you_mean(3.2, ["3.2"]) == "did you mean '3.2'?"


def test_the_report_page_has_the_bench_pages_look():
    """`workbench report` and `workbench bench all` pages: the same table style, text width and HTML file."""
    import pandas as pd

    from workbench.bench import page as bench_page
    from workbench.lab import stats
    from workbench.viz import page, report

    results = pd.DataFrame(dict(variant=["split", "split", "blocks", "blocks"], seconds=[0.25, 0.26, 1.13, 1.10]))
    table = stats.compare(results, "blocks")
    shown = report.stats_html(table, [])
    assert f"<table {page.TABLE}>" in shown and "<table border" not in shown
    assert bench_page.TABLE is page.TABLE and bench_page.WIDTH == page.WIDTH
    assert page.text_div("<h1>x</h1>").width == page.WIDTH and page.text_div("$$x$$").disable_math


def test_the_report_escapes_every_field_of_its_results_file_and_refuses_one_it_cannot_read(tmp_path, capsys):
    """Issue 47, item 3: a results.json is read back (another user may hand one over): every field the
    report shows as HTML is escaped (the page's Divs and title), and a file without metadata.variants
    (or a machine record) gives the one-line error or a line saying so, not a traceback."""
    import html

    import pandas as pd
    from bokeh.models import Div

    from workbench.lab.runner import Experiment
    from workbench.viz import report

    mark = "<img src=x onerror=alert(1)>"
    variants, parameter = [f"a{mark}", f"b{mark}"], f"p{mark}"
    rows = [
        {"run_id": f"run-{i}{mark}", "variant": variant, parameter: f"v{mark}", "seconds": 0.1 * (i + 1), "repeat": i}
        for i in range(3)
        for variant in variants
    ]
    machine = {
        "hostname": mark, "logical_cores": mark, "memory_total": 2**30, "memory_available": 2**30, "shm": None,
        "python": mark, "platform": mark, "packages": {mark: mark},
    }  # fmt: skip
    metadata = {"app": mark, "variants": variants, "description": mark, "size": mark, "seed": mark}
    metadata |= {"started": mark, "repeats": mark, "max_repeats": mark, "rounds": mark, "machine": machine}
    out = Experiment(
        app=mark,
        baseline=variants[0],
        parameters=[parameter],
        results=pd.DataFrame(rows),
        warmups=pd.DataFrame(),
        traces={},
        locality={},
        metadata=metadata,
    ).save(tmp_path / "hostile")
    assert cli.main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert f"<title>workbench: {html.escape(mark)}</title>" in page

    def shown_in(out) -> list[str]:  # what the page's Divs show: HTML
        return [div.text for div in report.build(Experiment.load(out)).select({"type": Div})]

    shown = shown_in(out)
    assert shown and not any(mark in text for text in shown), "a field went into the page's HTML unescaped"
    assert sum(text.count(html.escape(mark)) for text in shown) >= 12  # each field is shown, escaped
    document = json.loads((out / "results.json").read_text())
    del document["metadata"]["machine"]
    (out / "results.json").write_text(json.dumps(document))
    assert any("the machine is not recorded" in text for text in shown_in(out))
    del document["metadata"]["variants"]
    (out / "results.json").write_text(json.dumps(document))
    capsys.readouterr()
    assert cli.main(["report", str(out)]) == 2
    error = capsys.readouterr().err
    assert "is not a workbench experiment" in error and "metadata.variants, a list of names" in error
    assert "Traceback" not in error

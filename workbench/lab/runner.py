"""The experiment runner: an application x variants x parameter grid x repeats.

For each parameter point the data is placed once (untimed), each variant runs once as warm-up
(numba compile, first connections; excluded from the results and reported apart, and its answer
checked against the baseline's), then the variants run interleaved, A B A B ..., so a noisy
machine slows all of them alike. Every timed run records its wall time, the application's phases
and a trace (Dask's task stream, transfer bytes, workbench events).

The rounds adapt: after ``repeats`` rounds at a point, the runner adds rounds while a comparison
that matters there (:class:`Comparison`; by default every variant against the baseline) is not
decided yet, up to ``max_repeats`` (:func:`workbench.lab.stats.another_round` is the rule). Such a
round runs only the variants of the comparisons still undecided (still interleaved), so a variant
nothing waits on costs its ``repeats`` runs and no more.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

import pandas as pd
from distributed import get_task_stream

import workbench
from workbench import datasets, machine
from workbench.apps import registry
from workbench.lab import stats
from workbench.runtime import counts
from workbench.runtime import trace as tracing
from workbench.runtime.session import Session, node_id

T = TypeVar("T")
# The most rounds per point an experiment runs by default, by size, while a comparison is undecided
# (from ``repeats`` rounds on). None at ci: CI runs every lesson at ci, is near its time budget and
# needs a count it can assert; in a classroom up to 8, enough for a 2x effect on a noisy 2-core machine.
MAX_REPEATS = {"lab": 8, "full": 10}
# Columns the runner writes in every result row: no application parameter may take these names.
RESULT_COLUMNS = {
    "run_id",
    "variant",
    "seconds",
    "repeat",
    "tasks",
    "bytes_transferred",
    "submitted_tasks",
    "dependencies",
    "messages",
    "store_messages",
}


@dataclass
class Experiment:
    """What a run of the runner produced, and the questions everyone asks of it.

    Ask it instead of recomputing: :meth:`stats` (each variant against the baseline), :meth:`summary`
    and :meth:`moved` (mean seconds, tasks and MB moved per variant), :meth:`median_run` and
    :meth:`median_trace` (a variant's typical run and its trace), :meth:`bytes_moved` (who sent
    what to whom in that run), :meth:`locality_at` (where the blocks were). ``save``/``load``
    round-trip it through a directory.
    """

    app: str
    baseline: str
    parameters: list[str]
    results: pd.DataFrame
    warmups: pd.DataFrame
    traces: dict[str, pd.DataFrame] = field(default_factory=dict)
    locality: dict[str, dict[str, str]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def compared(self) -> bool:
        """Whether there are statistics to show: more than one variant, at least two runs of each."""
        runs = self.results.groupby([*self.parameters, "variant"]).size() if len(self.results) else pd.Series(dtype=int)
        return self.results["variant"].nunique() > 1 and bool(len(runs)) and int(runs.min()) >= 2

    def stats(self) -> pd.DataFrame:
        """Each variant against the baseline at each parameter point (see :mod:`workbench.lab.stats`);
        empty when there is nothing to compare (see :attr:`compared`)."""
        return stats.compare(self.results, self.baseline, self.parameters) if self.compared else pd.DataFrame()

    def summary(self, point: Mapping[str, Any] | None = None, phases: bool = False) -> pd.DataFrame:
        """Per parameter point (``point`` only, when given) and variant: mean seconds and runs (also
        for a single run), and the mean tasks and MB moved between processes where the runs were
        traced; with ``phases``, the mean seconds of each phase a variant recorded (``phase_<name>_s``)."""
        rows = self.runs(point=point)
        groups = rows.groupby([*self.parameters, "variant"])
        table = groups["seconds"].agg(["mean", "count"]).rename(columns={"mean": "mean_s", "count": "runs"})
        if "tasks" in rows:
            table["tasks"] = groups["tasks"].mean()
        if "bytes_transferred" in rows:
            table["MB_moved"] = groups["bytes_transferred"].mean() / 1e6
        if phases:
            for column in (c for c in rows if c.startswith("phase_") and c.endswith("_s")):
                table[column] = groups[column].mean()
        return table.reset_index()

    def points(self) -> list[dict[str, Any]]:
        """The parameter points run, in order (one empty point for an experiment without parameters)."""
        if not self.parameters:
            return [{}]
        return self.results[self.parameters].drop_duplicates().to_dict("records")

    def runs(self, variant: str | None = None, point: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """The timed runs of ``variant`` (all variants when None) at ``point`` (every point when None);
        a clear error for a variant or parameter this experiment does not have."""
        rows = self.results
        if variant is not None:
            if variant not in set(rows["variant"]):
                raise ValueError(f"this experiment has no variant {variant!r}; it has {sorted(set(rows['variant']))}")
            rows = rows[rows["variant"] == variant]
        for name, value in (point or {}).items():
            if name not in self.parameters:
                raise ValueError(f"this experiment has no parameter {name!r}; its parameters are {self.parameters}")
            rows = rows[rows[name] == value]
        return rows

    def median_run(self, variant: str, point: Mapping[str, Any] | None = None) -> str:
        """The run id of ``variant``'s median-time run at ``point`` (its typical run)."""
        rows = self.runs(variant, point).sort_values("seconds", kind="stable")
        if rows.empty:
            raise ValueError(f"no run of {variant!r} at {dict(point or {})}: the points run are {self.points()}")
        return str(rows.iloc[len(rows) // 2]["run_id"])

    def trace_of(self, run_id: str) -> pd.DataFrame:
        """The trace of one run (see :mod:`workbench.runtime.trace`)."""
        if run_id not in self.traces:
            raise KeyError(
                f"no trace of run {run_id!r}: traced runs are {sorted(self.traces)[:5]}... (traces are off with "
                "trace=False)"
            )
        return self.traces[run_id]

    def median_trace(self, variant: str, point: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """The trace of ``variant``'s median run at ``point``."""
        return self.trace_of(self.median_run(variant, point))

    def bytes_moved(self, variant: str | Sequence[str], point: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """Source x destination bytes of ``variant``'s median run at ``point`` (rows send, columns
        receive); a list of variants adds up the median run of each."""
        names = [variant] if isinstance(variant, str) else list(variant)
        if not names:
            raise ValueError("bytes_moved needs a variant (or a list of them), got an empty list")
        return tracing.bytes_moved(pd.concat([self.median_trace(name, point) for name in names], ignore_index=True))

    def moved(self, point: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """Per variant (at ``point``, or at each point): mean seconds, tasks and MB moved, in run order
        (tasks and MB only where the runs were traced)."""
        rows = self.runs(point=point)
        by = [*(p for p in self.parameters if point is None or p not in point), "variant"]
        measured = [c for c in ("seconds", "tasks", "bytes_transferred") if c in rows]
        table = rows.groupby(by, sort=False)[measured].mean()
        if "bytes_transferred" in table:
            table["MB_moved"] = table.pop("bytes_transferred") / 1e6
        return table.round(4)

    def locality_at(self, point: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Where the blocks were at ``point`` (block -> worker; the last point run when None)."""
        if not self.locality:
            raise KeyError("this experiment recorded no block locality")
        if point is None:
            return self.locality[next(reversed(self.locality))]
        for key, where in self.locality.items():
            params = json.loads(key)
            if all(name in params and params[name] == value for name, value in point.items()):
                return where
        raise KeyError(f"no block locality recorded at {dict(point)}: the points run are {self.points()}")

    def stats_table(self) -> str:
        """The papers' table format when there are statistics, else the mean time of each variant."""
        if self.compared:
            return stats.format_table(self.stats(), self.parameters)
        return (
            self.summary().to_string(index=False)
            + "\n(one run per variant, or one variant: no statistics; use --repeat 2 or more)"
        )

    def save(self, out: str | Path) -> Path:
        """Write results (CSV and JSON), warm-ups, statistics, metadata and one trace per run."""
        out = Path(out)
        (out / "traces").mkdir(parents=True, exist_ok=True)
        table = self.stats()
        self.results.to_csv(out / "results.csv", index=False)
        self.warmups.to_csv(out / "warmups.csv", index=False)
        table.to_csv(out / "stats.csv", index=False)
        document = {
            "metadata": self.metadata,
            "baseline": self.baseline,
            "parameters": self.parameters,
            "locality": self.locality,
            "results": json.loads(self.results.to_json(orient="records")),
            "warmups": json.loads(self.warmups.to_json(orient="records")),
            "stats": json.loads(table.to_json(orient="records")) if not table.empty else [],
        }
        (out / "results.json").write_text(json.dumps(document, indent=1, default=str))
        for run_id, frame in self.traces.items():
            tracing.write(frame, out / "traces" / run_id, name=f"{self.app} {run_id}")
        return out

    @classmethod
    def load(cls, out: str | Path) -> Experiment:
        """Read a directory written by :meth:`save`."""
        out = Path(out)
        document_path = out / "results.json"
        if not document_path.exists():
            raise FileNotFoundError(f"{out} holds no results.json: is it the --out directory of 'workbench run'?")
        try:
            document = json.loads(document_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(
                f"{document_path} is not a workbench experiment ({error}): was it written by 'workbench run'?"
            ) from None
        document = document if isinstance(document, dict) else {}
        missing = [
            k for k in ("metadata", "baseline", "parameters", "results", "warmups", "locality") if k not in document
        ]
        if not missing:
            missing = _malformed(document)
        if missing:
            raise ValueError(
                f"{document_path} is not a workbench experiment (missing, or not what 'workbench run' writes: "
                f"{'; '.join(missing)}): give the --out directory of 'workbench run'"
            )
        traces = {
            p.name.removesuffix(".json"): tracing.read(p)
            for p in sorted((out / "traces").glob("*.json"))
            if not p.name.endswith(".perfetto.json")
        }
        return cls(
            app=document["metadata"]["app"],
            baseline=document["baseline"],
            parameters=document["parameters"],
            results=pd.DataFrame(document["results"]),
            warmups=pd.DataFrame(document["warmups"]),
            traces=traces,
            locality=document["locality"],
            metadata=document["metadata"],
        )


def _is_text_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _malformed(document: dict[str, Any]) -> list[str]:
    """What a results document lacks, or holds in a shape :meth:`Experiment.load` and the report
    cannot read (a file is read back: it may be damaged or made by hand), as "metadata.variants, a
    list of names"; empty when it is an experiment's."""
    metadata = document["metadata"]
    if not isinstance(metadata, dict):
        return ["metadata, an object"]
    variants, parameters = metadata.get("variants"), document["parameters"]
    locality = document["locality"]
    checks = {
        "metadata.app, a name": isinstance(metadata.get("app"), str),
        "metadata.variants, a list of names": _is_text_list(variants) and bool(variants),
        "baseline, a variant's name": isinstance(document["baseline"], str),
        "parameters, a list of names": _is_text_list(parameters),
        "locality, blocks and workers at each point": isinstance(locality, dict)
        and all(isinstance(where, dict) and _is_text_list([*where.values()]) for where in locality.values()),
    }
    for table in ("results", "warmups"):
        rows = document[table]
        checks[f"{table}, a list of runs"] = isinstance(rows, list) and all(isinstance(row, dict) for row in rows)
    if checks["results, a list of runs"] and checks["parameters, a list of names"]:
        columns = ("run_id", "variant", "seconds", *parameters)
        checks[f"{', '.join(columns)} in every run of results (a name, a name, seconds, values)"] = all(
            all(column in row for column in columns)
            and isinstance(row["variant"], str)
            and isinstance(row["seconds"], (int, float))
            and not isinstance(row["seconds"], bool)
            and all(isinstance(row[column], (str, int, float, type(None))) for column in ("run_id", *parameters))
            for row in document["results"]
        )
    return [what for what, holds in checks.items() if not holds]


def point_key(point: Mapping[str, Any]) -> str:
    """A parameter point as the text key of :attr:`Experiment.locality` (numpy scalars as numbers)."""
    return json.dumps({k: (v.item() if hasattr(v, "item") else v) for k, v in point.items()}, sort_keys=True)


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in order."""
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm  # a widget in a notebook, text in a terminal

    return tqdm(total=total, disable=not enabled, desc="runs", unit="run", leave=False)


class Comparison(NamedTuple):
    """A comparison that matters: ``first`` against ``second`` at ``point`` (every point when None).
    The runner repeats a point until each comparison that applies there is decided."""

    first: str
    second: str
    point: Mapping[str, Any] | None = None

    def applies_at(self, point: Mapping[str, Any]) -> bool:
        """Whether this comparison is one of ``point``'s (its point's values are ``point``'s)."""
        return self.point is None or all(point.get(name) == value for name, value in self.point.items())


@dataclass(frozen=True)
class Declared:
    """An experiment as declared, every part of it checked once, before any cluster starts: the
    application, its variants (each a callable already checked: names, strategies, their needs),
    the baseline, the size, the grid, the repeats (its mappings read-only). The CLI declares before
    it starts a cluster; :func:`run_declared` runs what it is given without checking it again."""

    application: registry.Application
    variants: tuple[str, ...]
    baseline: str
    size: str
    grid: Mapping[str, tuple[Any, ...]]
    repeats: int
    calls: Mapping[str, registry.Variant]  # variant -> what the runner times (registry.Application.variant's)
    max_repeats: int = 0  # 0: as many as ``repeats`` (a fixed count)
    settle: tuple[Comparison, ...] | None = None  # None: every variant against the baseline

    @property
    def points(self) -> list[dict[str, Any]]:
        """Every parameter point, in order."""
        return grid_points(self.grid)

    def comparisons_at(self, point: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The pairs of variants whose comparison decides, at ``point``, whether another round runs."""
        if self.settle is None:
            return [(name, self.baseline) for name in self.variants if name != self.baseline]
        return [(c.first, c.second) for c in self.settle if c.applies_at(point)]


def declare(
    app: str | registry.Application,
    variants: Sequence[str] | None = None,
    size: str = "ci",
    grid: Mapping[str, Sequence[Any]] | None = None,
    repeats: int = 3,
    baseline: str | None = None,
    max_repeats: int | None = None,
    settle: Sequence[Comparison | tuple[Any, ...]] | None = None,
) -> Declared:
    """``app`` in ``variants`` (all its own when None) over ``grid`` (the app's grid for ``size``
    when None), checked here and only here: a misspelt variant or parameter, a strategy whose needs
    the application does not meet, an empty grid, a bad size or repeat count, a comparison of a
    variant or at a point not run is a clear ``ValueError`` (``TypeError`` for a wrong type) before
    anything starts.

    Rounds: at least ``repeats`` at each point, then more while a comparison of ``settle`` (pairs
    ``(first, second)`` or :class:`Comparison`; None: every variant against the baseline) is
    undecided there, up to ``max_repeats`` (None: :func:`default_max_repeats`: ``MAX_REPEATS[size]``,
    none more at ci; ``repeats`` of 1 is one run, no statistics); a round past ``repeats`` runs the
    variants of the undecided comparisons only. ``max_repeats=repeats`` is a fixed count.

    The baseline, every other variant's answer is checked against: ``baseline``, else the
    application's own when it is among the variants (or none were named), else the first named;
    it runs first when it was not named among the variants."""
    application = registry.get(app) if isinstance(app, str) else app
    if not isinstance(application, registry.Application):
        raise TypeError(f"app is an application name or a registry.Application, got {type(app).__name__}")
    if size not in datasets.SIZES:
        raise ValueError(f"size must be one of {datasets.SIZES}, got {size!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer of at least 1, got {repeats!r}")
    if max_repeats is None:
        max_repeats = default_max_repeats(size, repeats)
    if isinstance(max_repeats, bool) or not isinstance(max_repeats, int) or max_repeats < repeats:
        raise ValueError(
            f"max_repeats must be an integer of at least repeats ({repeats}), got {max_repeats!r}: "
            "give max_repeats=repeats for a fixed count"
        )
    grid = _checked_grid(application, grid, size)
    names, baseline = _chosen_variants(application, variants, baseline)
    calls = {name: application.variant(name) for name in names}  # the one check of each variant
    comparisons = None if settle is None else _checked_comparisons(settle, names, grid)
    return Declared(
        application,
        tuple(names),
        baseline,
        size,
        MappingProxyType(grid),
        repeats,
        MappingProxyType(calls),
        max_repeats,
        comparisons,
    )


def default_max_repeats(size: str, repeats: int) -> int:
    """The most rounds per point when none is given: ``MAX_REPEATS[size]`` (``repeats`` at a size
    it does not name), never fewer than ``repeats``; ``repeats`` of 1 stays one run (it asks for no
    statistics)."""
    return max(repeats, MAX_REPEATS.get(size, repeats)) if repeats >= 2 else repeats


def _checked_comparisons(
    settle: Sequence[Comparison | tuple[Any, ...]], names: list[str], grid: Mapping[str, tuple[Any, ...]]
) -> tuple[Comparison, ...]:
    """``settle`` as comparisons, each of two variants that run and at a point of the grid."""
    if isinstance(settle, (str, bytes)) or not isinstance(settle, Sequence):
        raise TypeError(f"settle is a list of (first, second) pairs of variants, got {settle!r}")
    comparisons = []
    for item in settle:
        if not isinstance(item, tuple) or not 2 <= len(item) <= 3:
            raise TypeError(f"each comparison to settle is (first, second) or (first, second, point), got {item!r}")
        comparison = Comparison(*item)
        unknown = [v for v in comparison[:2] if v not in names]
        if unknown or comparison.first == comparison.second:
            raise ValueError(f"a comparison to settle needs two different variants of {names}, got {item!r}")
        for name, value in (comparison.point or {}).items():
            if name not in grid or value not in grid[name]:
                raise ValueError(f"the comparison {item!r} is at a point the grid does not have: {dict(grid)}")
        comparisons.append(comparison)
    return tuple(comparisons)


def _chosen_variants(
    application: registry.Application, variants: Sequence[str] | None, baseline: str | None
) -> tuple[list[str], str]:
    """The variants to run (named, without repeats) and the baseline, first when it was not named."""
    if isinstance(variants, str):
        raise TypeError(f"variants is a list of variant names, got the string {variants!r}")
    names = list(dict.fromkeys(variants or application.strategies))
    if baseline is None:
        baseline = application.baseline if application.baseline in names else names[0]
    if baseline not in names:
        names.insert(0, baseline)
    return names, baseline


def _checked_grid(
    application: registry.Application, grid: Mapping[str, Sequence[Any]] | None, size: str
) -> dict[str, tuple[Any, ...]]:
    """``grid`` (the application's for ``size`` when None), checked: known parameters, non-empty lists."""
    if grid is None and size not in application.grids:
        raise ValueError(
            f"application {application.name!r} has no grid for size {size!r} (it has {sorted(application.grids)}): "
            "give the grid"
        )
    grid = dict(grid if grid is not None else application.grids[size])
    application.check_parameters(list(grid))
    clash = sorted(set(grid) & RESULT_COLUMNS)
    if clash:
        raise ValueError(f"parameters {clash} would overwrite the runner's own result columns {sorted(RESULT_COLUMNS)}")
    for name, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"grid[{name!r}] must be a non-empty list of values, got {values!r}")
    return {name: tuple(values) for name, values in grid.items()}


@dataclass
class _Runs:
    """One experiment's runs: what they share (the cluster, the declared experiment) and what they
    collect (timed rows, warm-up rows, traces, each point's locality)."""

    session: Session
    declared: Declared
    trace: bool
    nodes: dict[str, str]
    bar: Any
    results: list[dict[str, Any]] = field(default_factory=list)
    warmups: list[dict[str, Any]] = field(default_factory=list)
    traces: dict[str, pd.DataFrame] = field(default_factory=dict)
    locality: dict[str, Any] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)  # point key -> rounds run there

    def point(self, prepared: Any, params: dict[str, Any], index: int) -> None:
        """Grid point ``index``: a warm-up of each variant (answers checked against the baseline's),
        then ``repeats`` timed rounds of every variant, and more rounds of the variants of a comparison
        that matters here while it is undecided (up to ``max_repeats``), each run starting from the same
        holders: a variant no comparison waits on keeps its ``repeats`` runs."""
        self.locality[point_key(params)] = prepared.locality()
        holders = prepared.holders()  # copies a run left (steals, fetches) are dropped after each
        answers = {}
        for name in self.declared.variants:
            row, answers[name], _ = self.once(name, prepared, params, trace=False)
            prepared.restore(holders)
            self.warmups.append({**row, "run_id": f"warmup-p{index}-{name}"})
            self.bar.update()
        self.check(answers, prepared, params)
        declared, times = self.declared, {name: [] for name in self.declared.variants}
        pairs = declared.comparisons_at(params)
        rounds = 0
        while stats.another_round(
            [(times[a], times[b]) for a, b in pairs], rounds, declared.repeats, declared.max_repeats
        ):
            names = declared.variants
            if rounds >= declared.repeats:  # a round beyond the minimum: only what is still undecided
                pending = {v for a, b in pairs if stats.undecided(times[a], times[b]) for v in (a, b)}
                names = [name for name in declared.variants if name in pending]
                self.bar.total += len(names)
                self.bar.refresh()
            for name in names:
                run_id = f"run-{len(self.results):04d}"
                row, _, frame = self.once(name, prepared, params, trace=self.trace)
                prepared.restore(holders)
                self.results.append({"run_id": run_id, **row, "repeat": rounds})
                times[name].append(row["seconds"])
                if frame is not None:
                    self.traces[run_id] = frame
                self.bar.update()
            rounds += 1
        self.rounds[point_key(params)] = rounds

    def once(
        self, name: str, prepared: Any, params: dict[str, Any], trace: bool
    ) -> tuple[dict[str, Any], Any, pd.DataFrame | None]:
        """One timed call of the declared variant ``name`` (see :func:`_run_once`)."""
        call = self.declared.calls[name]
        return _run_once(self.session, name, call, prepared, params, trace, self.nodes if trace else None)

    def check(self, answers: dict[str, Any], prepared: Any, params: dict[str, Any]) -> None:
        """The baseline's answer is right (where the application can tell) and every variant's equals it."""
        application, baseline = self.declared.application, self.declared.baseline
        if application.check is not None:
            application.check(answers[baseline], prepared)
        for name in self.declared.variants:
            if not application.same_answer(answers[name], answers[baseline]):
                raise AssertionError(
                    f"{application.name}: variant {name!r} gives a different answer from the baseline "
                    f"{baseline!r} at {params}"
                )


def run_experiment(
    session: Session,
    app: str,
    variants: Sequence[str] | None = None,
    size: str = "ci",
    grid: Mapping[str, Sequence[Any]] | None = None,
    repeats: int = 3,
    seed: int = 0,
    trace: bool = True,
    progress: bool = True,
    baseline: str | None = None,
    max_repeats: int | None = None,
    settle: Sequence[Comparison | tuple[Any, ...]] | None = None,
) -> Experiment:
    """Run ``app`` in ``variants`` over ``grid`` (the app's grid for ``size`` by default): the
    experiment :func:`declare` checks (see it for the baseline and for how ``repeats``,
    ``max_repeats`` and ``settle`` decide the rounds), run by :func:`run_declared`."""
    declared = declare(app, variants, size, grid, repeats, baseline, max_repeats, settle)
    return run_declared(session, declared, seed, trace, progress)


def run_declared(
    session: Session, declared: Declared, seed: int = 0, trace: bool = True, progress: bool = True
) -> Experiment:
    """Run the experiment :func:`declare` checked on ``session``, with the dataset of ``seed``;
    ``trace``: a trace per timed run; ``progress``: a progress bar."""
    if not isinstance(declared, Declared):
        raise TypeError(f"run_declared takes what declare() returns, got {type(declared).__name__}")
    application = declared.application
    dataset = datasets.get(application.dataset, declared.size, seed)
    points = declared.points
    started = datetime.now(UTC).isoformat(timespec="seconds")
    nodes = {**session.worker_nodes(), tracing.CLIENT: node_id()}
    session.client.get_task_stream()  # switches the scheduler's task-stream plugin on before any run

    bar = _progress(len(points) * len(declared.variants) * (declared.repeats + 1), progress)
    runs = _Runs(session, declared, trace, nodes, bar)
    try:
        for index, params in enumerate(points):
            prepared = application.prepare(session, dataset, params)
            try:
                runs.point(prepared, params, index)
            finally:
                prepared.release()
    finally:
        bar.close()

    metadata = {
        "app": application.name,
        "description": application.description,
        "size": declared.size,
        "seed": seed,
        "repeats": declared.repeats,
        "max_repeats": max(declared.max_repeats, declared.repeats),
        "rounds": runs.rounds,
        "variants": list(declared.variants),
        "baseline": declared.baseline,
        "grid": {name: list(values) for name, values in declared.grid.items()},
        "dataset_bytes": dataset.nbytes,
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "workbench": workbench.__version__,
        "cluster": session.describe(),
        "machine": machine.describe(),
    }
    return Experiment(
        app=application.name,
        baseline=declared.baseline,
        parameters=list(declared.grid),
        results=pd.DataFrame(runs.results),
        warmups=pd.DataFrame(runs.warmups),
        traces=runs.traces,
        locality=runs.locality,
        metadata=metadata,
    )


def traced_call(
    session: Session, call: Callable[[tracing.Recorder], T], trace: bool = True, nodes: dict[str, str] | None = None
) -> tuple[T, float, tracing.Recorder, pd.DataFrame | None]:
    """Run ``call(recorder)`` once, timed; with ``trace``, its records as one frame: the task stream,
    the workers' incoming transfers, worker events and the recorder's own events (client side)."""
    recorder = tracing.Recorder()
    since = time.time()
    with get_task_stream(session.client) as stream:
        start = time.perf_counter()
        answer = call(recorder)
        seconds = time.perf_counter() - start
    frame = None
    if trace:
        records = tracing.from_task_stream(stream.data, tracing.incoming_transfer_logs(session, since))
        records += tracing.worker_events(session, since) + recorder.records
        frame = tracing.normalise(records, nodes)
    return answer, seconds, recorder, frame


def _run_once(
    session: Session,
    variant: str,
    function: registry.Variant,
    prepared: Any,
    params: dict[str, Any],
    trace: bool,
    nodes: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Any, pd.DataFrame | None]:
    """One timed call of ``function``, the variant ``variant`` (as declared, not looked up again):
    its result row, its answer, and its trace (or None)."""
    if trace:
        counts.install(session)
        since, messages, store = time.time(), counts.message_count(session), counts.store_message_count(session)
    answer, seconds, recorder, frame = traced_call(
        session, lambda recorder: function(session, prepared, recorder), trace, nodes
    )
    row: dict[str, Any] = {"variant": variant, **params, "seconds": seconds}
    row.update({f"phase_{name}_s": value for name, value in recorder.phases.items()})
    if frame is not None:
        row["tasks"] = int(((frame["action"] == "compute") & (frame["worker"] != tracing.CLIENT)).sum())
        row["bytes_transferred"] = int(frame.loc[frame["action"] == "transfer", "bytes"].sum())
        row.update(_counts(session, recorder, since, messages, store))
    return row, answer, frame


def _counts(session: Session, recorder: tracing.Recorder, since: float, messages: int, store: int) -> dict[str, int]:
    """What the run gave the scheduler (read after it, outside its time): tasks and dependencies
    submitted, scheduler-worker messages, messages to the store's catalogue and backends; per phase,
    its entries and the tasks and dependencies submitted inside it (``phase_<name>_n``, ``_tasks``,
    ``_dependencies``)."""
    graphs = counts.graphs_since(session, since)
    row = {
        "submitted_tasks": sum(g.tasks for g in graphs),
        "dependencies": sum(g.dependencies for g in graphs),
        "messages": counts.message_count(session) - messages,
        "store_messages": counts.store_message_count(session) - store,
    }
    windows: dict[str, list[tuple[float, float]]] = {}
    for r in recorder.records:
        if r["action"].startswith("phase:"):
            windows.setdefault(r["task"], []).append((r["start"], r["stop"]))
    for name, spans in windows.items():
        tasks, deps = counts.in_window(graphs, spans)
        row.update({f"phase_{name}_n": len(spans), f"phase_{name}_tasks": tasks, f"phase_{name}_dependencies": deps})
    return row

"""What an application is to the experiment runner, and the catalogue of applications.

An application names its dataset, places the data on the cluster for one parameter point
(``prepare``: untimed, generating and placing data is not what is measured), declares its work
once (:class:`~workbench.runtime.strategies.BlockWork`: the function of one block and the merge of
partial results) and its algorithm (``solve(plan, data)``: by default one reduce of the work),
and names the locality strategies it runs under. Its variants are those strategies: variant
``split`` of ``kmeans`` is k-means' one Lloyd loop with SplIter's plan. The runner times only the
variants and checks every variant's answer against the baseline's (``same_answer``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.datasets import Dataset
from workbench.names import did_you_mean
from workbench.runtime import strategies
from workbench.runtime.blocks import PlacedBlocks
from workbench.runtime.session import Session
from workbench.runtime.strategies import BlockWork, Plan
from workbench.runtime.strategies.base import Strategy, checked_capabilities, named, unmet
from workbench.runtime.trace import Recorder


@dataclass(kw_only=True)
class PlacedData:
    """Data placed for one parameter point: the blocks strategies map over, blocks aligned with them
    (labels beside points), and ``args``, the constants every block call gets after its blocks.

    Applications subclass it to add what their ``solve`` reads (initial centres, a stopping rule ...).
    """

    blocks: PlacedBlocks | None
    aligned: tuple[PlacedBlocks, ...] = ()
    args: tuple[Any, ...] = ()

    def locality(self) -> dict[str, str]:
        """Block index -> the worker holding it (aligned arrays' blocks prefixed ``aligned<i>``)."""
        where = self.blocks.locality() if self.blocks is not None else {}
        for i, other in enumerate(self.aligned):
            where |= {f"aligned{i}{k}": w for k, w in other.locality().items()}
        return where

    def holders(self) -> list[list[str | None]]:
        """The holders of every placed array's blocks (the blocks', then each aligned array's): one
        worker per block, as ``PlacedBlocks.holders`` gives them."""
        return [placed.holders() for placed in (self.blocks, *self.aligned) if placed is not None]

    def restore(self, holders: list[list[str | None]]) -> int:
        """Put every block back on its holder in ``holders``, as :meth:`holders` gave them (see
        ``PlacedBlocks.restore``)."""
        placed = [p for p in (self.blocks, *self.aligned) if p is not None]
        return sum(p.restore(each) for p, each in zip(placed, holders))

    def release(self) -> None:
        """Release every placed array (and the views made of it: store collections ...)."""
        for placed in (self.blocks, *self.aligned):
            if placed is not None:
                placed.release()


Variant = Callable[[Session, Any, Recorder], Any]
Solve = Callable[[Plan, Any], Any]
# The granularity parameter of every blocked application (SplIter's sweeps count blocks per core).
BLOCKS_PER_WORKER = {"blocks_per_worker": "blocks of the data per worker (more: smaller blocks; default 1)"}


def reduce_work(work: BlockWork) -> Solve:
    """The default algorithm: one reduce of ``work`` with the data's ``args``."""

    def solve(plan: Plan, data: PlacedData) -> Any:
        return plan.reduce(work, *data.args)

    solve.__doc__ = f"one reduce of {work.name} over the blocks"
    return solve


@dataclass(frozen=True)
class StrategyVariant:
    """One variant: the application's algorithm run with one strategy's plan (what the runner times).
    Made by :meth:`Application.variant`, which checked it: calling it looks nothing up again."""

    application: Application
    strategy: Strategy

    def __call__(self, session: Session, data: Any, recorder: Recorder) -> Any:
        """Run the application's algorithm with this strategy's plan over ``data``."""
        with self.strategy.open(session, data.blocks, recorder, aligned=data.aligned) as plan:
            return self.application.solver(plan, data)

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        return f"{self.application.name} with strategy {self.strategy.name!r}: {self.strategy.description}"


@dataclass(frozen=True)
class Application:
    """An application: its dataset, how to place data, its work and algorithm, its strategies and grids."""

    name: str
    description: str
    dataset: str
    prepare: Callable[[Session, Dataset, dict[str, Any]], Any]
    strategies: Sequence[str]  # the variants: names of registered strategies
    baseline: str
    grids: Mapping[str, Mapping[str, Sequence[Any]]]  # size -> parameter -> values
    parameters: Mapping[str, str]  # every parameter ``prepare`` reads -> what it sets (unnamed ones: defaults)
    work: BlockWork | None = None
    solve: Solve | None = None  # the algorithm over a plan (default: one reduce of ``work``)
    same_answer: Callable[[Any, Any], bool] = field(default=lambda a, b: a == b)
    check: Callable[[Any, Any], None] | None = None  # check(answer, data): raises AssertionError on a wrong answer
    knobs: Mapping[str, Sequence[Any]] = field(default_factory=dict)  # parameter -> choices for live panels
    # What ``prepare`` gives every strategy, and what the work needs from one beyond its block (names of
    # strategies.base.CAPABILITIES): a variant whose strategy and application do not meet is refused
    # when it is made (:meth:`variant`, so when an experiment is declared), not half-way through a run.
    gives: frozenset[str] = frozenset({"blocks"})
    needs: frozenset[str] = frozenset()

    @property
    def solver(self) -> Solve:
        """``solve``, or one reduce of ``work`` when the application declares only its work."""
        if self.solve is not None:
            return self.solve
        if self.work is None:
            raise ValueError(f"application {self.name!r} declares neither work nor solve")
        return reduce_work(self.work)

    @property
    def variants(self) -> dict[str, Variant]:
        """Variant name -> what the runner calls, one per strategy, in declared order (each checked by
        :meth:`variant`)."""
        return {name: self.variant(name) for name in self.strategies}

    def check_parameters(self, names: Sequence[str]) -> None:
        """A clear error (with a close match) for a parameter this application does not read."""
        for name in names:
            if name not in self.parameters:
                hint = did_you_mean(name, self.parameters)
                raise ValueError(
                    f"application {self.name!r} has no parameter {name!r}"
                    + (f" ({hint})" if hint else "")
                    + "; its parameters are "
                    + ", ".join(f"{n} ({what})" for n, what in self.parameters.items())
                )

    def variant(self, name: str) -> Variant:
        """The variant ``name``, checked: one of this application's, and its strategy and this
        application meet each other's needs; else a clear error that says what is missing."""
        if name not in self.strategies:
            hint = did_you_mean(name, self.strategies)
            raise ValueError(
                f"application {self.name!r} has no variant {name!r}"
                + (f" ({hint})" if hint else "")
                + f"; it has {list(self.strategies)}"
            )
        strategy = strategies.get(name)
        if missing := unmet(strategy.needs, self.gives):
            raise ValueError(
                f"variant {name!r} of {self.name!r} cannot run: strategy {name!r} needs {', '.join(missing)}, "
                f"which application {self.name!r} does not give (it gives {sorted(self.gives)})"
            )
        if missing := unmet(self.needs, strategy.gives):
            giving = [s for s in strategies.names() if not unmet(self.needs, strategies.get(s).gives)]
            raise ValueError(
                f"variant {name!r} of {self.name!r} cannot run: its work needs {', '.join(missing)}, which "
                f"strategy {name!r} does not give; the strategies that give it: {giving}"
            )
        return StrategyVariant(self, strategy)


def resized(dataset: Dataset, params: dict[str, Any], shape_keys: Sequence[str] = ("points",)) -> Dataset:
    """The dataset with the shape parameters found in ``params`` (e.g. ``points``) overriding its size's."""
    from workbench import datasets

    shape = {k: int(params[k]) for k in shape_keys if k in params}
    return datasets.get(dataset.name, dataset.size, dataset.seed, **shape) if shape else dataset


_APPS: dict[str, Application] = {}


def register(app: Application) -> Application:
    """Check ``app`` (strategies exist, baseline among them, grids and knobs name declared parameters,
    its ``gives`` and ``needs`` are known capabilities) and add it."""
    if isinstance(app.strategies, str) or not app.strategies:
        raise ValueError(f"application {app.name!r} needs a list of strategy names, got {app.strategies!r}")
    for name in app.strategies:
        strategies.get(name)  # a clear error for a misspelt strategy
    if app.baseline not in app.strategies:
        raise ValueError(f"baseline {app.baseline!r} of {app.name!r} is not one of its variants {list(app.strategies)}")
    if app.work is None and app.solve is None:
        raise ValueError(f"application {app.name!r} declares neither its work (BlockWork) nor a solve function")
    for grid in app.grids.values():
        app.check_parameters(list(grid))
    app.check_parameters(list(app.knobs))
    checked_capabilities(app.gives, f"application {app.name!r}'s gives")
    checked_capabilities(app.needs, f"application {app.name!r}'s needs")
    _APPS[app.name] = app
    return app


def unregister(name: str) -> None:
    """Forget the application ``name`` (tests and notebooks that define their own)."""
    _APPS.pop(name, None)


def get(name: str) -> Application:
    """The application ``name``; a close-match suggestion when there is none (importing
    :mod:`workbench.apps` registers the built-in applications)."""
    return named(_APPS, name, "application")


def names() -> list[str]:
    """Every registered application, sorted."""
    return sorted(_APPS)

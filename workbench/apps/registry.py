"""What an application is to the experiment runner, and the catalogue of applications.

An application names its dataset, prepares the data on the cluster for one parameter point
(untimed: generating and placing data is not what is measured), and offers variants: functions
that compute the same answer in different ways. The runner times only the variants.
"""
from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from datasets import Dataset
from workbench.runtime.session import Session
from workbench.runtime.trace import Recorder


class Prepared(Protocol):
    """Data placed for one parameter point."""

    def locality(self) -> dict[str, str]:
        """Block name -> worker address holding it."""

    def release(self) -> None:
        """Free what was placed (worker memory, segments, files)."""


Variant = Callable[[Session, Any, Recorder], Any]
# The granularity parameter of every blocked application (SplIter's sweeps count blocks per core).
BLOCKS_PER_WORKER = {"blocks_per_worker": "blocks of the data per worker (more: smaller blocks; default 1)"}


@dataclass(frozen=True)
class Application:
    """An application: its dataset, how to place data, its variants, its parameter grids."""

    name: str
    description: str
    dataset: str
    prepare: Callable[[Session, Dataset, dict[str, Any]], Prepared]
    variants: Mapping[str, Variant]
    baseline: str
    grids: Mapping[str, Mapping[str, Sequence[Any]]]  # size -> parameter -> values
    parameters: Mapping[str, str]  # every parameter ``prepare`` reads -> what it sets (unnamed ones: defaults)
    same_answer: Callable[[Any, Any], bool] = field(default=lambda a, b: a == b)
    knobs: Mapping[str, Sequence[Any]] = field(default_factory=dict)  # parameter -> choices for live panels

    def check_parameters(self, names: Sequence[str]) -> None:
        """A clear error (with a close match) for a parameter this application does not read."""
        for name in names:
            if name not in self.parameters:
                hint = difflib.get_close_matches(name, list(self.parameters), n=1)
                raise ValueError(
                    f"application {self.name!r} has no parameter {name!r}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + "; its parameters are "
                    + ", ".join(f"{n} ({what})" for n, what in self.parameters.items())
                )

    def variant(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            raise ValueError(f"application {self.name!r} has no variant {name!r}; it has {list(self.variants)}") from None


def resized(dataset: Dataset, params: dict[str, Any], shape_keys: Sequence[str] = ("points",)) -> Dataset:
    """The dataset with the shape parameters found in ``params`` (e.g. ``points``) overriding its size's."""
    import datasets

    shape = {k: int(params[k]) for k in shape_keys if k in params}
    return datasets.get(dataset.name, dataset.size, dataset.seed, **shape) if shape else dataset


def per_mode(function: Callable[[Session, Any, str, Recorder], Any]) -> dict[str, Variant]:
    """One variant per task-runtime mode (files, dask, rro) of ``function(session, data, mode, recorder)``."""
    from workbench.runtime.tasks import MODES

    return {mode: functools.partial(_in_mode, function, mode) for mode in MODES}


def _in_mode(function: Callable[..., Any], mode: str, session: Session, data: Any, recorder: Recorder) -> Any:
    return function(session, data, mode, recorder)


_APPS: dict[str, Application] = {}


def register(app: Application) -> Application:
    if app.baseline not in app.variants:
        raise ValueError(f"baseline {app.baseline!r} of {app.name!r} is not one of its variants {list(app.variants)}")
    for grid in app.grids.values():
        app.check_parameters(list(grid))
    app.check_parameters(list(app.knobs))
    _APPS[app.name] = app
    return app


def _load_builtin() -> None:
    import workbench.apps.csvm  # noqa: F401  (each registers itself)
    import workbench.apps.histogram  # noqa: F401
    import workbench.apps.kmeans  # noqa: F401
    import workbench.apps.knn  # noqa: F401
    import workbench.apps.matmul  # noqa: F401


def get(name: str) -> Application:
    """The application ``name``; a close-match suggestion when there is none."""
    _load_builtin()
    if name not in _APPS:
        hint = difflib.get_close_matches(name, _APPS, n=1)
        raise ValueError(f"no application {name!r}; there are {sorted(_APPS)}" + (f". Did you mean {hint[0]!r}?" if hint else ""))
    return _APPS[name]


def names() -> list[str]:
    _load_builtin()
    return sorted(_APPS)

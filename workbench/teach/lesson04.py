"""Checks of lesson 04 · The active store: an active method of one's own, bytes per iteration, and
the catalogue's record of a replicated object."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.runtime.store import PersistentObject
from workbench.teach.answers import close, fmt, number
from workbench.teach.feedback import not_yet, passed
from workbench.teach.registry import exercise

READINGS = 1_000_000
CALL_TIMEOUT = 60.0  # seconds for the learner's active method


@exercise(
    "04.1",
    answers=("Sensor2",),
    concept="an active method runs where the object lives: only its name, arguments and result travel",
    hint="derive Sensor2 from Sensor and give it a method spread(self) marked with the store's active decorator, "
    "as Sensor's mean is; numpy's std of self.readings is the spread. Persist one with store.make_persistent and "
    "call the method the three ways of the table above (a future, .value(), .local())",
)
def own_active_method(Sensor2: Any, store: Any) -> tuple:  # noqa: N803 (the learner's class name)
    """Persist a Sensor2 with a million readings; spread() by active call, value call and local call agree."""
    if not (isinstance(Sensor2, type) and issubclass(Sensor2, PersistentObject)):
        return not_yet(f"Sensor2 should be a class derived from Sensor (a PersistentObject), got {Sensor2!r:.80}")
    if not callable(getattr(Sensor2, "spread", None)):
        return not_yet("Sensor2 has no method spread(self) yet")
    readings = np.random.default_rng(5).normal(0.0, 2.0, READINGS)
    expected = float(readings.std())
    proxy = store.make_persistent(Sensor2(readings.copy()))
    try:
        if not hasattr(proxy.spread, "value"):
            return not_yet("spread is not an active method: decorate it with @active so it runs where the object is")
        answers = {}
        for path, call in (
            ("active call", lambda: proxy.spread().result(timeout=CALL_TIMEOUT)),
            ("value call", proxy.spread.value),
            ("non-active (local) call", proxy.spread.local),
        ):
            try:
                answers[path] = call()
            except Exception as error:  # noqa: BLE001 (the learner's method: say which call failed)
                hung = isinstance(error, TimeoutError) or "did not answer" in str(error)
                return not_yet(
                    f"spread() by {path} "
                    + (f"did not return within {CALL_TIMEOUT:.0f} s" if hung else f"raised {type(error).__name__}")
                    + f": {str(error)[:200]}"
                )
    finally:
        proxy.delete()
    for path, value in answers.items():
        got = number(value, f"spread() by {path}")
        if not np.isclose(got, expected, rtol=1e-9):
            return not_yet(
                f"spread() by {path} gave {got:.6g}, which is not the standard deviation of the object's readings "
                "(the check persists a Sensor2 of its own and calls spread() on it)"
            )
    return passed(f"the three paths agree: spread() = {expected:.6g} where the object lives and here")


@exercise(
    "04.2",
    answers=("nonactive_mb_per_iteration", "active_mb_per_iteration"),
    concept="the non-active baseline brings every fragment to the code in every iteration; active calls move only"
    " what the method needs and returns",
    hint="km.summary() has MB_moved per run; average it per variant and divide by the iterations "
    "(km.points()[0]['iterations'])",
)
def bytes_per_iteration(nonactive_mb_per_iteration: Any, active_mb_per_iteration: Any, km: Any) -> tuple:
    """MB moved per k-means iteration by the non-active and the active variants."""
    iterations = km.points()[0].get("iterations", 1)
    per_variant = km.summary().groupby("variant")["MB_moved"].mean() / iterations
    for variant, value in (("non-active", nonactive_mb_per_iteration), ("active", active_mb_per_iteration)):
        name = f"{variant.replace('-', '')}_mb_per_iteration"
        got, expected = number(value, name), float(per_variant[variant])
        if not close(got, expected, 0.1) and abs(got - expected) > 0.005:
            whole = close(got, expected * iterations, 0.1)
            swapped = close(got, float(per_variant["active" if variant == "non-active" else "non-active"]), 0.1)
            return not_yet(
                f"{name} is {fmt(got)}, which is not what km measured for the {variant} variant per iteration"
                + (f" (you gave the whole run: divide by the {iterations} iterations)" if whole else "")
                + (" (that is the other variant's figure)" if swapped and not whole else "")
            )
    ratio = per_variant["non-active"] / max(per_variant["active"], 1e-9)
    return passed(
        f"non-active moves {fmt(per_variant['non-active'])} MB per iteration (every fragment), active "
        f"{fmt(per_variant['active'])} MB (centres out, partial sums back): {fmt(ratio)}x less"
    )


@exercise(
    "04.3",
    answers=("probe_info", "alias_still_there"),
    concept="the store keeps a catalogue record per object: where its copies live, its aliases and version; "
    "deleting the object removes every copy and alias",
    hint="persist any Sensor with make_persistent and its alias argument (the name 'probe'); the proxy's "
    "replicate() makes a second copy, its info() is the record, its delete() removes it; store.aliases() lists the "
    "aliases that remain",
)
def replicated_record(probe_info: Any, alias_still_there: Any, store: Any) -> tuple:
    """The catalogue record of a replicated object (two holders), and its alias gone after delete."""
    if not isinstance(probe_info, dict) or "workers" not in probe_info:
        return not_yet("probe_info should be the dict that proxy.info() returns (with 'workers', 'nbytes', ...)")
    holders, aliases = probe_info.get("workers"), probe_info.get("aliases") or []
    if not isinstance(holders, (list, tuple)) or not isinstance(aliases, (list, tuple)):
        return not_yet("probe_info's 'workers' and 'aliases' should be lists: pass proxy.info() itself")
    if store is not None and not set(holders) <= set(store.backends()):
        return not_yet("probe_info's holders are not this store's backends: pass the record that proxy.info() returned")
    if len(holders) < 2:
        return not_yet(f"probe_info lists {len(holders)} holder(s): call replicate() before info()")
    if "probe" not in aliases:
        return not_yet(f"the object in probe_info has the aliases {list(aliases)}: persist it with alias='probe'")
    left = [a for a in aliases if a in store.aliases()]
    if left:
        return not_yet(f"the alias {left[0]!r} is still in the store: delete the object (proxy.delete())")
    if not isinstance(alias_still_there, (bool, np.bool_)) or alias_still_there:
        return not_yet(
            f"alias_still_there is {alias_still_there!r}: it should be whether 'probe' is among store.aliases() once "
            "the object is deleted, asked of the store after delete()"
        )
    return passed(
        f"{probe_info.get('nbytes')} B, version {probe_info.get('version')}, on {len(holders)} holders; after "
        "delete() the alias 'probe' is gone"
    )

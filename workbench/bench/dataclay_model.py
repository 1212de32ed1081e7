"""The dataClay class the store benchmark calls (importable by a dataClay backend; needs ``dataclay``)."""

from __future__ import annotations

from dataclay import DataClayObject, activemethod


class DataClayNull(DataClayObject):
    """dataClay's counterpart of :class:`workbench.bench.store.Null`: a method that does nothing."""

    @activemethod
    def nothing(self) -> None:
        """Nothing: what is left is the cost of the call."""
        return None

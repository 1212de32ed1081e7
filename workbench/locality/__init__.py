"""A locality diagnosis of any Dask work: what the course teaches to see, named with its evidence.

::

    from workbench.locality import observe

    with observe(client) as seen:      # a distributed.Client or a workbench session
        ...                            # any Dask work: arrays, dataframes, delayed, futures
    report = seen.report
    report.findings                    # [Finding(kind, summary, evidence, remedy, lessons, saves_seconds, ...)]
    report                             # in a notebook: the findings, then the evidence figures
    report.to_html("diagnosis.html")   # one page that opens offline
    report.save("observation.json")    # `workbench diagnose observation.json` reads it back

One job per module: :mod:`~workbench.locality.observe` (the context manager), :mod:`~.watch` (the
scheduler plugin while it is open), :mod:`~.report` (the records, saved and loaded),
:mod:`~.findings` (the kinds, their thresholds and remedies), :mod:`~.figures` (the page).
"""

from __future__ import annotations

from workbench.locality.findings import KINDS, THRESHOLDS, Finding
from workbench.locality.observe import Observation, observe
from workbench.locality.report import NotATrace, Report

load = Report.load

__all__ = ["KINDS", "THRESHOLDS", "Finding", "NotATrace", "Observation", "Report", "load", "observe"]

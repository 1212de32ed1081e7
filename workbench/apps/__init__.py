"""The seed applications, each declared once (its work, its algorithm, its strategies) and
registered on import: ``workbench.apps.get("kmeans")``. Importing any module of this package
registers them all."""

from workbench.apps import csvm, histogram, kmeans, knn, matmul, prk, skewed, tiered
from workbench.apps.registry import Application, PlacedData, get, names, register, unregister

BUILTIN = (
    csvm.APP,
    histogram.APP,
    kmeans.APP,
    knn.APP,
    matmul.APP,
    skewed.APP,
    tiered.HISTOGRAM1D_APP,
    tiered.MATADD_APP,
    *prk.APPS,
)

__all__ = ["Application", "BUILTIN", "PlacedData", "get", "names", "register", "unregister"]

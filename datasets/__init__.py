"""Catalogue of the seed datasets: ``datasets.get("kmeans", size="ci")``."""

from datasets.catalogue import SIZES, ArraySpec, Dataset, describe, get, names

__all__ = ["SIZES", "ArraySpec", "Dataset", "describe", "get", "names"]

"""Catalogue of the seed datasets: ``workbench.datasets.get("kmeans", size="ci")``; per-block cost factors for
the imbalance experiments: ``workbench.datasets.block_costs(n_blocks, skew)``."""

from workbench.datasets.catalogue import SIZES, ArraySpec, Dataset, block_costs, describe, get, names

__all__ = ["SIZES", "ArraySpec", "Dataset", "block_costs", "describe", "get", "names"]

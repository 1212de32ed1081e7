"""Catalogue of the seed datasets: ``datasets.get("kmeans", size="ci")``; per-block cost factors for
the imbalance experiments: ``datasets.block_costs(n_blocks, skew)``."""

from datasets.catalogue import SIZES, ArraySpec, Dataset, block_costs, describe, get, names

__all__ = ["SIZES", "ArraySpec", "Dataset", "block_costs", "describe", "get", "names"]

"""Benchmarks: each prints ratios against a baseline or peer measured in the same run."""

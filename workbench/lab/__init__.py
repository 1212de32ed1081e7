"""Experiments: run applications in variants and sizes, time them, tidy the results."""

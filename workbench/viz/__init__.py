"""Figures (bokeh, inline resources: no internet needed) and widget panels (ipywidgets)."""

from workbench.viz.notebook import setup_notebook

__all__ = ["setup_notebook"]

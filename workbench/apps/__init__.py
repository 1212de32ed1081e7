"""The seed applications, each written once over the kernels and run in every variant."""

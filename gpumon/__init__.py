"""gpumon: a terminal cockpit for PyTorch training servers."""

__version__ = "0.1.0"

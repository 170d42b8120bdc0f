"""Runs: validated specs, run directories under the state dir, the detached supervisor, run summaries."""

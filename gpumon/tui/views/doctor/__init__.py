"""The doctor view."""

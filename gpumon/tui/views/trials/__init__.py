"""The trials view."""

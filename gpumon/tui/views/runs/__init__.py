"""The runs view."""

"""The gpus view."""

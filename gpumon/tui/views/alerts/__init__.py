"""The Alerts view: every run's alerts and where they went."""

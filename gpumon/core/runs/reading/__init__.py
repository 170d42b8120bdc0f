"""Reading a run's telemetry: its summary folded as it goes, series, progress, the live monitor."""

"""Training programs launched by gpumon (filled by the launcher issue)."""

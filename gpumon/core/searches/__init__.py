"""Search files (TOML): read and checked without Ray, by the launcher's spec check and by gpumon.tune alike."""

"""Small CPU-runnable demo scripts: memory leaks and their healthy twins, an OOM; see README.md."""

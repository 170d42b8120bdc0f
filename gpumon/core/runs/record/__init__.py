"""A run's record: its spec, its files in the state dir, the index, the listing."""

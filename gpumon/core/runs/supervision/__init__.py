"""A run's supervision: the launcher, the supervisor that owns the run, and what it does when nobody watches."""

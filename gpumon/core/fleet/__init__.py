"""The fleet: every host's GPUs and runs, reached with the user's own OpenSSH or a Ray cluster."""

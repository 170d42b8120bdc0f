"""Slurm as the engine: runs submitted as jobs (submit.py), started inside the allocation (step.py), their
job states (jobs.py) and ends in Slurm's words (ending.py). Everything goes through Slurm's own commands."""

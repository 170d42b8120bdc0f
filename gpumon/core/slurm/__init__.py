"""Slurm: what the cluster says (squeue, sinfo, scontrol) and gpumon's use of it."""

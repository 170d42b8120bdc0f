"""Where a run lives: this host, the GPU queue, a Slurm job, a node of a group over ssh.

``base.py`` is the interface and how a run records its place; ``places.py`` chooses one (``for_spec``,
``of_record``) and starts or stops a run there. This file imports nothing: the launcher reads ``base``
without loading the places, which are built on it.
"""

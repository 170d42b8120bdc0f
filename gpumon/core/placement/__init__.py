"""Where a run lives: this host, the GPU queue, a Slurm job, a node of a group over ssh.

``record.py`` is how a run records its place (the leaf the store and the launcher import), ``base.py`` the
interface, ``places.py`` chooses one (``for_spec``, ``of_record``) and starts or stops a run there. This
file imports nothing: importing ``record`` must not load the places, which are built on the store.
"""

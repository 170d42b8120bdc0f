"""Several hosts over ssh: a multi-node group, gpumon's commands on each host, the group's state."""

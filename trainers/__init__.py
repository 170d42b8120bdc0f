"""Training programs that gpumon launches and watches (real PyTorch, CPU or CUDA).

- ``python -m trainers.ddp``: DistributedDataParallel under torchrun (alone: world size 1).
- ``python -m trainers.dp``: torch.nn.DataParallel in one process (the plain model with < 2 GPUs).
- ``python -m trainers.model_parallel``: the model in two stages, ``--mode naive|micro-batch|pipeline``
  (pipeline: torch.distributed.pipelining, one process per stage under torchrun).

Shared pieces: ``data`` (digits, CIFAR-10, synthetic), ``model`` (Bottleneck ResNet presets, MLP,
``split_model``), ``cli`` (options, exit 2 on bad input), ``loop`` (training and validation),
``checkpoint`` (atomic saves, --resume, --init-from/--freeze), ``pipeline``. Each program reports
through ``gpumon.telemetry`` (a no-op outside a gpumon run).
"""

"""A ResNet with Bottleneck blocks (no torchvision) and an MLP, both cuttable into two pipeline stages.

Both models are ``nn.Sequential`` of named children (stem/flatten, blocks, head), so a stage built
from a slice of the children keeps the full model's parameter names: checkpoints, ``--freeze``
prefixes and gradients line up between the whole model and its stages.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from trainers.cli import ARCHS, NORMS, PRESETS  # the options' choices, known before torch loads

# preset: (blocks per stage, base width); stage i has width * 2**i planes and outputs 4x that.


def norm_layer(kind: str, channels: int) -> nn.Module:
    """BatchNorm, GroupNorm (independent of batch size, so micro-batches do not change it) or nothing."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(math.gcd(channels, 8), channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}; choose from {', '.join(NORMS)}")


def conv(in_ch: int, out_ch: int, kernel: int, stride: int = 1, norm: str = "batch") -> nn.Conv2d:
    # A bias is redundant in front of a norm layer.
    return nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=kernel // 2, bias=norm == "none")


class Bottleneck(nn.Module):
    """1x1 reduce → 3x3 (carries the stride) → 1x1 expand (×4), plus an identity or projection shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, planes: int, stride: int = 1, norm: str = "batch") -> None:
        super().__init__()
        out_ch = planes * self.expansion
        self.conv1, self.norm1 = conv(in_ch, planes, 1, norm=norm), norm_layer(norm, planes)
        self.conv2, self.norm2 = conv(planes, planes, 3, stride, norm), norm_layer(norm, planes)
        self.conv3, self.norm3 = conv(planes, out_ch, 1, norm=norm), norm_layer(norm, out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(conv(in_ch, out_ch, 1, stride, norm), norm_layer(norm, out_ch))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.relu(self.norm2(self.conv2(out)))
        out = self.norm3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Sequential):
    """stem, ``layer{i}_{j}`` Bottleneck blocks (stage i ≥ 2 starts with stride 2), head (avg pool + linear)."""

    def __init__(
        self,
        layers: tuple[int, ...],
        width: int,
        in_channels: int,
        num_classes: int,
        image_size: int,
        norm: str = "batch",
    ) -> None:
        super().__init__()
        self.layers = tuple(layers)
        if image_size <= 32:  # 8x8 digits or 32x32 CIFAR: a 7x7/2 stem and max pool would leave nothing
            stem = [conv(in_channels, width, 3, norm=norm), norm_layer(norm, width), nn.ReLU(inplace=True)]
        else:
            stem = [conv(in_channels, width, 7, 2, norm), norm_layer(norm, width), nn.ReLU(inplace=True)]
            stem.append(nn.MaxPool2d(3, stride=2, padding=1))
        self.add_module("stem", nn.Sequential(*stem))
        in_ch = width
        for i, blocks in enumerate(layers):
            planes = width * 2**i
            for j in range(blocks):
                stride = 2 if i > 0 and j == 0 else 1
                self.add_module(f"layer{i + 1}_{j}", Bottleneck(in_ch, planes, stride, norm))
                in_ch = planes * Bottleneck.expansion
        self.add_module("head", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)))


class MLP(nn.Sequential):
    """flatten, ``depth`` × (Linear(width) + ReLU) as ``layer{i}``, linear head: a pipeline benchmark workload."""

    def __init__(self, in_features: int, num_classes: int, width: int = 512, depth: int = 8) -> None:
        super().__init__()
        self.add_module("flatten", nn.Flatten())
        for i in range(depth):
            self.add_module(f"layer{i}", nn.Sequential(nn.Linear(in_features if i == 0 else width, width), nn.ReLU()))
        self.add_module("head", nn.Linear(width if depth else in_features, num_classes))


def build_model(
    preset: str,
    in_channels: int,
    num_classes: int,
    image_size: int,
    *,
    arch: str = "resnet",
    norm: str = "batch",
    width: int = 512,
    depth: int = 8,
) -> nn.Module:
    """A ResNet ``preset`` (``norm`` applies) or, with arch="mlp", an MLP of ``depth`` layers of ``width``."""
    if arch == "mlp":
        return MLP(in_channels * image_size * image_size, num_classes, width, depth)
    if arch != "resnet":
        raise ValueError(f"unknown arch {arch!r}; choose from {', '.join(ARCHS)}")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    layers, base = PRESETS[preset]
    return ResNet(layers, base, in_channels, num_classes, image_size, norm)


def split_model(model: nn.Module, at: int | None = None) -> tuple[nn.Sequential, nn.Sequential]:
    """Two stages sharing ``model``'s modules, with stage1(stage0(x)) == model(x).

    The default cut puts the first half of the blocks (between stem and head) in stage 0.
    """
    children = list(model.named_children())
    if at is None:
        at = 1 + (len(children) - 2) // 2
    if not 0 < at < len(children):
        raise ValueError(f"cannot cut a model of {len(children)} children at {at}")
    return nn.Sequential(OrderedDict(children[:at])), nn.Sequential(OrderedDict(children[at:]))


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


class TwoStageModel(nn.Module):
    """``module`` cut in two with stage 0 on ``devices[0]`` and stage 1 on ``devices[1]``.

    ``split_size`` 0 runs the whole batch through stage 0 then stage 1 (naive); otherwise the batch
    goes in chunks, pipelined as in PyTorch's single-process model-parallel tutorial. The whole model
    is ``.module`` (as with DDP) so checkpoints keep its usual parameter names.
    """

    def __init__(self, module: nn.Module, devices: tuple[torch.device, torch.device], split_size: int = 0) -> None:
        super().__init__()
        self.module = module
        stage0, stage1 = split_model(module)
        # A plain tuple: registering the stages as submodules would list every parameter twice.
        self.stages = (stage0.to(devices[0]), stage1.to(devices[1]))
        self.devices = devices
        self.split_size = split_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (stage0, stage1), (dev0, dev1) = self.stages, self.devices
        x = x.to(dev0)
        if not self.split_size or self.split_size >= len(x):
            return stage1(stage0(x).to(dev1))
        chunks = iter(x.split(self.split_size))
        pending = stage0(next(chunks)).to(dev1)
        outputs = []
        for chunk in chunks:
            outputs.append(stage1(pending))  # queued on dev1 ...
            pending = stage0(chunk).to(dev1)  # ... while dev0 starts the next chunk (CUDA kernels are async)
        outputs.append(stage1(pending))
        return torch.cat(outputs)

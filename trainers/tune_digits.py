"""The default Tune trainable: PyTorch's classic CIFAR-10 Ray Tune tutorial, on the 8x8 digits.

Searches l1, l2 (the two hidden layers), lr and batch_size like the tutorial;
reports validation loss and accuracy once per epoch with ``tune.report`` and
saves a ``tune.Checkpoint`` each time, which it resumes from when Tune
restarts the trial (PBT, a failure with retries, a restored experiment).
Config ``epochs`` (default 10) caps the epochs; ``momentum`` defaults to 0.9.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from trainers.data import load, make_loader


class Net(nn.Module):
    """The tutorial's LeNet-like net, sized for 1x8x8 images."""

    def __init__(self, l1: int = 120, l2: int = 84, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(16 * 2 * 2, l1)
        self.fc2 = nn.Linear(l1, l2)
        self.fc3 = nn.Linear(l2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def train_digits(config: dict[str, Any]) -> None:
    from ray import tune  # the trainable runs inside a Ray worker: ray is there already

    device = "cuda" if torch.cuda.is_available() else "cpu"
    net = Net(int(config.get("l1", 120)), int(config.get("l2", 84))).to(device)
    optimizer = torch.optim.SGD(
        net.parameters(), lr=float(config.get("lr", 1e-2)), momentum=float(config.get("momentum", 0.9))
    )
    data = load("digits", val_fraction=0.2, seed=0)
    assert data.val is not None
    batch = int(config.get("batch_size", 16))
    train = make_loader(data.train, batch, shuffle=True, seed=0)
    val = make_loader(data.val, 256, shuffle=False)

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / "state.pt", map_location=device)
        net.load_state_dict(state["net"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"]) + 1

    for epoch in range(start, int(config.get("epochs", 10))):
        net.train()
        for images, labels in train:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
        val_loss, correct = 0.0, 0
        net.eval()
        with torch.no_grad():
            for images, labels in val:
                out = net(images.to(device))
                val_loss += float(F.cross_entropy(out, labels.to(device), reduction="sum"))
                correct += int((out.argmax(1).cpu() == labels).sum())
        n = len(data.val)
        with tempfile.TemporaryDirectory() as folder:
            state = {"net": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(state, Path(folder) / "state.pt")
            tune.report(
                {"loss": val_loss / n, "accuracy": correct / n},
                checkpoint=tune.Checkpoint.from_directory(folder),
            )

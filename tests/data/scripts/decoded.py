"""The slow dataset of input_bound.py and slow_feed.py: each sample is 'read and decoded' in ``__getitem__`` (a
wait of ``seconds``, as a slow disk or a remote store would make), 32 features and one of 4 classes."""

import time

import torch
from torch.utils.data import Dataset


class Decoded(Dataset):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        time.sleep(self.seconds)
        return torch.randn(32), i % 4

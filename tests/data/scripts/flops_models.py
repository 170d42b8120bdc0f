"""A plain training loop (no gpumon code): an MLP or a CNN fed by a DataLoader, or a small transformer on token
batches made in the loop (no DataLoader). tests/test_flops.py imports ``build`` and ``batches`` to count one
step of the same model with FlopCounterMode itself.

    python flops_models.py mlp|cnn|transformer STEPS [SEQ2_FROM]

SEQ2_FROM: from that step on the transformer's sequence is twice as long (a shape change).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

VOCAB, SEQ, BATCH = 512, 32, 8


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, 64)
        self.pos = nn.Embedding(256, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t).unsqueeze(0))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def build(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 8 * 8, 10),
        )
    return TinyGPT()


def batches(kind: str, seq: int = SEQ) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch (inputs, targets)."""
    if kind == "mlp":
        return torch.randn(32, 128), torch.randint(0, 10, (32,))
    if kind == "cnn":
        return torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))
    ids = torch.randint(0, VOCAB, (BATCH, seq + 1))
    return ids[:, :-1], ids[:, 1:]


def loss_of(kind: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if kind == "transformer":
        return nn.functional.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))
    return nn.functional.cross_entropy(out, y)


def main() -> None:
    kind, steps = sys.argv[1], int(sys.argv[2])
    seq2_from = int(sys.argv[3]) if len(sys.argv) > 3 else None
    model = build(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    done = 0
    while done < steps:
        long = seq2_from is not None and done + 1 >= seq2_from
        data = [batches(kind, SEQ * 2 if long else SEQ) for _ in range(16 if seq2_from is None else 1)]
        for x, y in torch.utils.data.DataLoader(data, batch_size=None, shuffle=False):
            loss = loss_of(kind, model, x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done >= steps:
                break


if __name__ == "__main__":
    main()

"""A plain loop with gradient accumulation, as the PyTorch forums and HF's guides write it (no gpumon code):
``(loss / ACCUM).backward()`` on each of ACCUM micro-batches from a DataLoader(batch_size=32), then one
``optimizer.step()``; it prints each optimizer step's loss the way such a script does, the sum of the scaled
micro-batch losses (their mean).

    python grad_accum.py ACCUM STEPS [scaler|bf16]

``bf16``: the forward under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
``scaler``: under CPU autocast (bf16) with a GradScaler; the first step's batches are outliers (x 100, a large
loss) whose scaled loss overflows the first scale, so the scaler skips that step (no optimizer step: the script
counts and prints only the steps taken, and the skipped step's loss must be no later step's).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

BATCH = 32


def main() -> None:
    accum, steps = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "plain"
    amp = mode == "scaler"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # the first scale is as large as float32 goes: the outlier step overflows it; the skip backs it off to 3e8
    scaler = torch.amp.GradScaler("cpu", init_scale=3e38, backoff_factor=1e-30) if amp else None
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * 40, 16), torch.randint(0, 4, (BATCH * 40,)))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    done, micro, step_loss = 0, 0, 0.0
    while done < steps:
        for x, y in loader:
            if amp and micro < accum:
                x = x * 100  # the outlier step
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode != "plain"):
                loss = nn.functional.cross_entropy(model(x), y) / accum
            step_loss += loss.item()
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            micro += 1
            if micro % accum:
                continue
            if scaler is not None:
                before = scaler.get_scale()
                scaler.step(opt)
                scaler.update()
                stepped = scaler.get_scale() >= before  # a skipped step backs the scale off
                if not stepped:
                    print(f"skipped a step, loss {step_loss!r}", flush=True)
            else:
                opt.step()
                stepped = True
            opt.zero_grad()
            if stepped:
                done += 1
                print(f"step {done} loss {step_loss!r}", flush=True)
            step_loss = 0.0
            if done >= steps:
                break


if __name__ == "__main__":
    main()

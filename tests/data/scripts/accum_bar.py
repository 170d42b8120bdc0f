"""A loop with gradient accumulation (4 micro-batches per optimizer step) over 2 epochs of a DataLoader of 40
micro-batches, shown by a tqdm bar, as people write it: ``run``: one bar over the whole run's micro-batches
(``tqdm(total=epochs * len(loader))``, updated per micro-batch); ``epoch``: a bar per epoch over the loader
(``tqdm(loader)``); ``epoch-total``: a bar made each epoch with the epoch's total, updated by hand
(``tqdm(total=len(loader))``). At 95% of the micro-batches it writes where it is to ``at.json`` and waits for the
gate file.

    python accum_bar.py OUT_DIR run|epoch|epoch-total
"""

import json
import os
import sys
import time

import torch
from tqdm import tqdm

out, mode = sys.argv[1], sys.argv[2]
gate = os.path.join(out, "gate")
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(160, 8), torch.randn(160, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)  # 40 micro-batches an epoch
epochs, accum = 2, 4
whole = epochs * len(loader)
bar = tqdm(total=whole, mininterval=0) if mode == "run" else None
seen, steps = 0, 0
for _epoch in range(epochs):
    batches = loader if bar is not None else tqdm(loader, mininterval=0)
    own = tqdm(total=len(loader), mininterval=0) if mode == "epoch-total" else None
    if own is not None:
        batches = loader
    for i, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
            steps += 1
        seen += 1
        for counting in (bar, own):
            if counting is not None:
                counting.update(1)
        time.sleep(0.03)
        if seen == whole * 95 // 100:
            shown = bar or own or batches
            time.sleep(1.1)  # tqdm's position is written at most once a second: the next redraw writes it
            before = time.time()
            shown.refresh()
            with open(os.path.join(out, "at.json"), "w") as fh:
                json.dump({"micro_batches": seen, "of": whole, "steps": steps, "t": before}, fh)
            end = time.monotonic() + 600  # never left behind for good by a test that failed before its gate
            while not os.path.exists(gate) and time.monotonic() < end:
                time.sleep(0.05)
    if own is not None:
        own.close()
if bar is not None:
    bar.close()
with open(os.path.join(out, "done.json"), "w") as fh:
    json.dump({"micro_batches": seen, "steps": steps}, fh)

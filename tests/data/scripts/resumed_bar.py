"""A run resumed from a checkpoint at step 5000 of 6000, its bar as people write it after loading one:
``tqdm(total=6000, initial=5000)``, one optimizer step per update. At step 5280 (88% of the job) it writes where it
is to ``at.json`` and waits for the gate file.

    python resumed_bar.py OUT_DIR
"""

import json
import os
import sys
import time

import torch
from tqdm import tqdm

out = sys.argv[1]
gate = os.path.join(out, "gate")
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start, total = 5000, 6000  # as a checkpoint would have said
bar = tqdm(total=total, initial=start, mininterval=0.1)
for step in range(start + 1, total + 1):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    bar.update(1)
    time.sleep(0.006)  # slower than the step recorder's 200 a second: every step is recorded
    if step == 5280:
        time.sleep(1.1)  # tqdm's position is written at most once a second: the next redraw writes it
        before = time.time()
        bar.refresh()
        with open(os.path.join(out, "at.json"), "w") as fh:
            json.dump({"step": step, "t": before}, fh)
        end = time.monotonic() + 600
        while not os.path.exists(gate) and time.monotonic() < end:
            time.sleep(0.05)
bar.close()

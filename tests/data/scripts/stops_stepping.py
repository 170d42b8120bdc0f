"""A run that stops stepping, as a rank does when its peer hangs: 40 steps of ~0.05 s, then it blocks (no event
written) until the gate file appears, writing when it stopped to ``blocked.json``; then 5 more steps.

    python stops_stepping.py OUT_DIR
"""

import json
import os
import sys
import time

import torch

out = sys.argv[1]
gate = os.path.join(out, "gate")
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 46):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
    if step == 40:
        with open(os.path.join(out, "blocked.json"), "w") as fh:
            json.dump({"step": step, "t": time.time()}, fh)
        end = time.monotonic() + 600  # never left behind for good by a test that failed before its gate
        while not os.path.exists(gate) and time.monotonic() < end:
            time.sleep(0.05)

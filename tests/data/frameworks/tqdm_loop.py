"""A plain loop with an epoch bar, a batch bar made again each epoch, and set_postfix(loss=...).

With "telemetry" it also calls telemetry.log with the raw loss while the bar shows a smoothed one:
the script's own call must win."""

import json
import sys

import torch
from tqdm import tqdm, trange

from gpumon import telemetry

own = "telemetry" in sys.argv
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
raw, shown, smooth, step = [], [], None, 0
for _epoch in trange(3, desc="epoch"):
    bar = tqdm(range(25), leave=False)
    for _ in bar:
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        value = loss.item()
        smooth = value if smooth is None else 0.9 * smooth + 0.1 * value
        bar.set_postfix(loss=smooth)
        raw.append(value)
        shown.append(smooth)
        if own:
            telemetry.log(step=step, loss=value)
with open(sys.argv[1], "w") as fh:
    json.dump({"raw": raw, "shown": shown}, fh)

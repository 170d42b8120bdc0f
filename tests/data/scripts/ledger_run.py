"""A run whose wall time is not all steps (issue 52): it starts up slowly (a dataset index built for START_S), saves
a checkpoint with torch.save every SAVE_EVERY steps (~SAVE_S each: a file that writes slowly), evaluates under
torch.no_grad() every EVAL_EVERY steps (~EVAL_S), then writes its results for END_S after the last step. It times
each part itself, from its process's start, and prints them as OWN_LEDGER={json}."""

import io
import json
import os
import time

START_S, SAVE_S, EVAL_S, END_S = 6.0, 1.5, 1.0, 1.5
STEPS, SAVE_EVERY, EVAL_EVERY = 300, 100, 150


def process_start() -> float:
    """This process's start by the kernel's clock (what a user's `ps` says), in time.time()'s terms."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return time.time() - up + ticks / os.sysconf("SC_CLK_TCK")


began = process_start()
time.sleep(START_S)  # building the dataset's index
import torch  # noqa: E402

torch.set_num_threads(1)


class SlowFile(io.BytesIO):
    """A checkpoint file on a slow disk: its first write takes SAVE_S."""

    def write(self, data):  # type: ignore[no-untyped-def]
        if not self.tell():
            time.sleep(SAVE_S)
        return super().write(data)


model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
own = {"steps": 0.0, "checkpoint": 0.0, "eval": 0.0}
first = None
for step in range(1, STEPS + 1):
    t0 = time.time()
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    time.sleep(0.005)
    opt.step()
    t1 = time.time()
    if first is None:
        first, t0 = t1, t1  # start-up runs to the first step's end
    own["steps"] += t1 - t0
    if step % SAVE_EVERY == 0:
        torch.save(model.state_dict(), SlowFile())
        own["checkpoint"] += time.time() - t1
    if step % EVAL_EVERY == 0:
        t2 = time.time()
        with torch.no_grad():
            end = t2 + EVAL_S
            while time.time() < end:
                model(x)
                time.sleep(0.01)
        own["eval"] += time.time() - t2
last = time.time()
own["startup"] = (first or last) - began
print("OWN_LEDGER=" + json.dumps(own), flush=True)
time.sleep(END_S)  # writing the results

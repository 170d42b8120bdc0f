"""A run that evaluates under torch.no_grad() for EVAL_S after STEPS steps, twice, the second time as its last work,
then writes its results for END_S (issue 52). With ``[runs] stall_after = 1`` the supervisor calls each evaluation a
stall (a no-grad stretch says nothing until it ends), and the run ends with the second one still open. It times its
steps and evaluations itself and prints them as OWN_LEDGER={json}."""

import json
import time

import torch

EVAL_S, END_S, STEPS = 3.0, 1.0, 100

torch.set_num_threads(1)
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
own = {"steps": 0.0, "eval": 0.0}
first = None
for _ in range(2):
    for _ in range(STEPS):
        t0 = time.time()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep(0.005)
        opt.step()
        t1 = time.time()
        if first is not None:  # start-up runs to the first step's end
            own["steps"] += t1 - t0
        first = first or t1
    t2 = time.time()
    with torch.no_grad():
        while time.time() < t2 + EVAL_S:
            model(x)
            time.sleep(0.01)
    own["eval"] += time.time() - t2
print("OWN_LEDGER=" + json.dumps(own), flush=True)
time.sleep(END_S)  # writing the results

"""Checkpoints saved without torch.save at the top (issue 52): torch.distributed.checkpoint.save (which writes
through torch.save inside) and safetensors' save_file, between steps. Prints SAVED=<n> when done."""

import os
import sys
import tempfile

import torch

torch.set_num_threads(1)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 256)
out = tempfile.mkdtemp()
saved = 0
for step in range(1, 61):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 20:
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": model.state_dict()}, checkpoint_id=os.path.join(out, "dcp"))
        saved += 1
    if step == 40:
        from safetensors.torch import save_file

        save_file(model.state_dict(), os.path.join(out, "model.safetensors"))
        saved += 1
print(f"SAVED={saved}", file=sys.stdout, flush=True)

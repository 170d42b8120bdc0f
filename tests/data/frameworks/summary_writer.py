"""A loop that logs to TensorBoard (torch.utils.tensorboard, or tensorboardX with "x")."""

import json
import sys

import torch

if "x" in sys.argv[2:]:
    from tensorboardX import SummaryWriter
else:
    from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
writer = SummaryWriter(log_dir="tb")
losses = []
for step in range(60):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    writer.add_scalar("Loss/train", loss.item(), step)
    writer.add_scalars("lr", {"group0": 0.01}, step)
    losses.append(loss.item())
writer.close()
with open(sys.argv[1], "w") as fh:
    json.dump({"losses": losses}, fh)

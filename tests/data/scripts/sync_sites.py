"""A loop that reads its loss on the host each step: ``total += loss.item()`` and ``print(loss)`` (on a GPU
each is a device-to-host sync; the print's happens inside torch's tensor formatting)."""

import torch

model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
total = 0.0
for _ in range(3):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += loss.item()
    print(loss)

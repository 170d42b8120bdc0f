"""A LightningModule that logs nothing (no self.log) with accumulate_grad_batches=4, CPU: it writes each
training_step's loss; Lightning divides each by 4 before its backward and steps every 4 batches."""

import json
import sys

import lightning as L
import torch

losses: list[float] = []
steps: list[int] = []  # the optimizer steps taken before each batch (Lightning's global_step)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        losses.append(loss.item())
        steps.append(self.trainer.global_step)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(160, 8), torch.randn(160, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
trainer = L.Trainer(
    max_epochs=2, accelerator="cpu", devices=1, enable_checkpointing=False, logger=False, accumulate_grad_batches=4
)
trainer.fit(Tiny(), loader)
with open(sys.argv[1], "w") as fh:
    json.dump({"losses": losses, "steps": steps, "global_step": trainer.global_step}, fh)

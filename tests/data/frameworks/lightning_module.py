"""A LightningModule with self.log("train_loss", ...), CPU, progress bar on (the default)."""

import json
import sys

import lightning as L
import torch

losses: list[float] = []


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(80, 8), torch.randn(80, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, enable_checkpointing=False)
trainer.fit(Tiny(), loader)
with open(sys.argv[1], "w") as fh:
    json.dump({"losses": losses, "total": trainer.estimated_stepping_batches}, fh)

"""A LightningModule trained for 200 steps with the Trainer's default progress bar (Rich's, rich being
installed), or with a RichProgressBar the script chose ("rich"). At step 112 it waits for a file (GO), so
what its log shows mid-run can be read while it runs. Writes the bar it got to BAR."""

import json
import os
import sys
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import RichProgressBar

BAR, GO, CHOICE = sys.argv[1], sys.argv[2], sys.argv[3]


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        if self.global_step == 112:
            deadline = time.monotonic() + 300
            while not os.path.exists(GO) and time.monotonic() < deadline:
                time.sleep(0.05)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(800, 8), torch.randn(800, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
chosen = [RichProgressBar()] if CHOICE == "rich" else []
trainer = L.Trainer(
    max_epochs=2, accelerator="cpu", devices=1, enable_checkpointing=False, logger=False, callbacks=chosen
)
with open(BAR, "w") as fh:
    json.dump({"bar": type(trainer.progress_bar_callback).__name__}, fh)
trainer.fit(Tiny(), loader)

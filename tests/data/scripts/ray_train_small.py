"""A small Ray Train job as its guide writes one: a TorchTrainer of 2 CPU workers, ``prepare_model``,
``prepare_data_loader`` and ``ray.train.report`` once an epoch; nothing of gpumon in it.

``--lightning``: the same workers run a Lightning Trainer (``ray.train.lightning``'s strategy and report callback).
"""

import argparse
import tempfile
import time

import ray
import ray.train
import ray.train.torch
import torch
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
from torch.utils.data import DataLoader, TensorDataset


def data() -> TensorDataset:
    torch.manual_seed(0)
    x = torch.randn(512, 16)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def train_loop(config: dict) -> None:
    loader = ray.train.torch.prepare_data_loader(DataLoader(data(), batch_size=32, shuffle=True))
    net = ray.train.torch.prepare_model(model())
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for epoch in range(config["epochs"]):
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(net(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(config["step_ms"] / 1000)  # the compute of a real model: the run lasts long enough to measure
        ray.train.report({"epoch": epoch, "train_loss": loss.item(), "accuracy": 0.5 + epoch / 100})


def lightning_loop(config: dict) -> None:
    import lightning.pytorch as pl
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model()

        def training_step(self, batch, _):
            loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = pl.Trainer(
        max_epochs=config["epochs"], accelerator="cpu", devices="auto", strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
        enable_checkpointing=False, logger=False, enable_progress_bar=False,
    )  # fmt: skip
    trainer = prepare_trainer(trainer)
    trainer.fit(Net(), DataLoader(data(), batch_size=32, shuffle=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--lightning", action="store_true")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False)
    trainer = TorchTrainer(
        lightning_loop if args.lightning else train_loop,
        train_loop_config={"epochs": args.epochs, "step_ms": args.step_ms},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=ray.train.RunConfig(storage_path=tempfile.mkdtemp(), name="small"),
    )
    print("result", trainer.fit().metrics)

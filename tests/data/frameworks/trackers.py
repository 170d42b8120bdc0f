"""wandb.log (offline) or mlflow.log_metric (a file store), as argv[2] says."""

import json
import os
import sys

losses = [1.0 / (i + 1) for i in range(30)]
if sys.argv[2] == "wandb":
    import wandb

    run = wandb.init(mode="offline", project="gpumon-test", dir=os.getcwd())
    for i, loss in enumerate(losses):
        wandb.log({"loss": loss, "acc": i / 30}, step=i)
    run.finish()
else:
    import mlflow

    mlflow.set_tracking_uri("file:" + os.path.abspath("mlruns"))
    with mlflow.start_run():
        for i, loss in enumerate(losses[:-1]):
            mlflow.log_metric("loss", loss, step=i)
        mlflow.log_metrics({"loss": losses[-1], "acc": 1.0}, step=len(losses) - 1)
with open(sys.argv[1], "w") as fh:
    json.dump({"losses": losses}, fh)

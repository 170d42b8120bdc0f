"""telemetry.log with a loss that turns NaN and an infinite gradient norm."""

import json
import sys

from gpumon import telemetry

for step in range(1, 6):
    telemetry.log(step=step, loss=1.0 / step if step < 4 else float("nan"), grad_norm=float("inf"))
with open(sys.argv[1], "w") as fh:
    json.dump({}, fh)

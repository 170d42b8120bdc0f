"""A 2-rank gloo DDP job for torchrun --max-restarts: in the first attempt rank 1 raises "corrupt record in shard
7" after --fail-at steps (with --kill it SIGKILLs itself instead; with --exit N it calls sys.exit(N); with --hang S
it hangs, and rank 0 raises gloo's timeout after S seconds in the all-reduce rank 1 never joins); the
restarted attempt resumes from the last checkpoint (every --every steps) and, with --hold FILE, keeps stepping
until FILE exists. Rank 0 shows a tqdm bar over the whole job (initial = the resumed step), and prints what it
did: "failed at step N", "resumed at step N"."""

import argparse
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--fail-at", type=int, default=26)
parser.add_argument("--every", type=int, default=10)
parser.add_argument("--ckpt", default="ckpt.txt")
parser.add_argument("--hold", default="")
parser.add_argument("--step-ms", type=float, default=20)
parser.add_argument("--kill", action="store_true", help="rank 1 is SIGKILLed (no exception) instead of raising")
parser.add_argument("--exit", type=int, default=0, help="rank 1 calls sys.exit(EXIT) instead of raising")
parser.add_argument("--hang", type=float, default=0, help="rank 1 hangs; the group's timeout (s) ends the attempt")
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=args.hang) if args.hang else None)
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt = Path(args.ckpt)
start = int(ckpt.read_text()) if attempt and ckpt.exists() else 0
if rank == 0 and attempt:
    print(f"resumed at step {start}", flush=True)
bar = tqdm(total=args.steps, initial=start, disable=rank != 0)
step = start


def going() -> bool:
    """Every rank goes on together (the hold file is seen by the ranks at different steps)."""
    keep = torch.tensor([int(step < args.steps or bool(attempt and args.hold and not Path(args.hold).exists()))])
    dist.all_reduce(keep, op=dist.ReduceOp.MIN)
    return bool(keep.item())


while going():
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step <= args.steps:
        bar.update(1)
    if rank == 0 and step % args.every == 0:
        ckpt.write_text(str(step))
    if attempt == 0 and rank == 1 and step == args.fail_at:
        print(f"failed at step {step}", flush=True)
        if args.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.exit:
            sys.exit(args.exit)
        if args.hang:
            time.sleep(3600)  # the others wait in their next all-reduce until the group's timeout
        raise RuntimeError("corrupt record in shard 7")
    time.sleep(args.step_ms / 1000)
bar.close()
dist.destroy_process_group()

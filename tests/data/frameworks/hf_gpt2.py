"""HF Trainer on a tiny GPT-2 built from its config (no download), CPU; writes the Trainer's own logs.

python hf_gpt2.py OUT [GRADIENT_ACCUMULATION_STEPS LOGGING_STEPS]
"""

import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2))
accumulation, logging = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (1, 5)
args = TrainingArguments(
    output_dir="hf_out",
    max_steps=40,
    logging_steps=logging,
    gradient_accumulation_steps=accumulation,
    per_device_train_batch_size=4,
    report_to=[],
    save_strategy="no",
    use_cpu=True,
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(64))
trainer.train()
with open(sys.argv[1], "w") as fh:
    json.dump({"log_history": trainer.state.log_history, "max_steps": trainer.state.max_steps}, fh)

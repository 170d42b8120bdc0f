"""A postfix value whose reading fails: the script must not notice (the hook turns itself off)."""

import json
import sys

from tqdm import tqdm


class Odd:
    size = 1

    def item(self) -> float:
        raise RuntimeError("cannot read me")

    def __str__(self) -> str:
        return "odd"


bar = tqdm(range(5))
for i in bar:
    bar.set_postfix(loss=Odd() if i == 2 else 1.0 / (i + 1))
with open(sys.argv[1], "w") as fh:
    json.dump({"finished": True}, fh)

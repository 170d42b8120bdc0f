"""Secrets a script prints never leave the machine through gpumon (issue 49 item 9): the alert a webhook gets and
what serve's page reads are redacted, while the user's own ``gpumon logs`` shows the log whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumon.core.redact import redact
from tests.alert_receiver import Receiver
from tests.conftest import wait_until
from tests.serve_helpers import get, serving
from tests.test_alerts_channels import Cli

HF = "hf_" + "Q" * 34
OPENAI = "sk-proj-" + "a1B2" * 8
SECRETS = [
    (f"loading with HF_TOKEN={HF}", HF),
    (f"KeyError: '{OPENAI}'", OPENAI),
    ("github: ghp_" + "x" * 36, "x" * 36),
    ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "11ABCDEFG0123456789_abcdefghijklmnop"),
    ("slack xoxb-2048-4096-abcdefABCDEF", "2048-4096-abcdefABCDEF"),
    ("AWS_ACCESS_KEY_ID AKIAIOSFODNN7EXAMPLE in use", "IOSFODNN7EXAMPLE"),
    ("post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX failed", "T00000000"),
    ("https://discord.com/api/webhooks/123456789012345678/abcDEF_ghi-JKL", "abcDEF_ghi-JKL"),
    ("DB_PASSWORD=hunter2hunter2 ./train.sh", "hunter2hunter2"),
    ('config {"api_key": "k-123456789"}', "k-123456789"),
    ("MY_SERVICE_SECRET_VALUE=s3cr3t-v4lue", "s3cr3t-v4lue"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", "eyJhbGciOiJIUzI1NiJ9"),
]
# Our own words and a script's ordinary lines: never touched.
PLAIN = [
    "step 120 loss 2.325 tokens_per_s=1200 lr=3e-4",
    "KeyError: 'label'",
    "memory leak on rank 0: `total_loss` in train.py:16 keeps every step's autograd graph",
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-07.bin'",
    "Tokenizer loaded: 50257 tokens",
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_each_secret_shape_is_redacted_and_what_names_it_stays(text: str, secret: str) -> None:
    shown = redact(text)
    assert secret not in shown and "[redacted]" in shown, shown
    assert redact(shown) == shown  # redacting again changes nothing
    assert text[:10] in shown or text.startswith("https://")  # what leads to it still reads


@pytest.mark.parametrize("text", PLAIN)
def test_ordinary_text_is_left_whole(text: str) -> None:
    assert redact(text) == text


LEAKS_SECRETS = f"""import sys
print("HF_TOKEN={HF}", flush=True)
raise KeyError("{OPENAI}")
"""


def test_a_failed_runs_secrets_reach_neither_the_webhook_nor_the_page_but_stay_in_its_log(tmp_path: Path) -> None:
    receiver = Receiver().start()
    try:
        cli = Cli(tmp_path, f'[alerts]\nwebhook = "{receiver.url}"\n')
        run_id = cli.launch(LEAKS_SECRETS)
        assert wait_until(lambda: receiver.arrived, timeout=90), "no alert arrived"
        sent = json.dumps(receiver.requests)
        assert HF not in sent and OPENAI not in sent, sent
        assert "KeyError" in receiver.arrived[0]["text"] and "[redacted]" in sent
        with serving(tmp_path / "home", gpus=1) as (_state, url):
            assert wait_until(lambda: run_id.encode() in get(url + "api/state")[2], timeout=30)
            for path in ("api/state", f"api/runs/{run_id}", "api/runs", "metrics"):
                body = get(url + path)[2].decode()
                assert HF not in body and OPENAI not in body, (path, body[:2000])
        log = cli("logs", run_id, "-n", "50")
        assert HF in log.stdout + log.stderr and OPENAI in log.stdout + log.stderr  # the user's own log: whole
    finally:
        receiver.stop()

"""Secrets out of what gpumon serves or sends: a script's log lines and exception texts reach alerts, webhooks and
serve's page, and scripts print tokens (``HF_TOKEN=hf_...``, a ``KeyError`` carrying an API key).

``redact(text)`` replaces the well-known shapes of secrets with ``[redacted]``, keeping what names them (the
variable, ``Bearer``, a token's kind prefix) so the text still reads. What the user reads on their own terminal
(``gpumon logs``, the TUI's log pane) stays whole: those are their own logs, on their own machine.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "[redacted]"
_SLACK, _DISCORD = "https://hooks.slack.com/", "https://discord.com/api/webhooks/"

# (pattern, replacement): the prefix that says what kind of secret it was is kept
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # Slack and Discord webhook URLs: the URL is the secret
    (
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]+"),
        "https://hooks.slack.com/" + MASK,
    ),
    (
        re.compile(r"https://(?:canary\.|ptb\.)?discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_.-]+"),
        "https://discord.com/api/webhooks/" + MASK,
    ),
    # Hugging Face, OpenAI/Anthropic-style, GitHub, Slack tokens
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "hf_" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), "github_pat_" + MASK),
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{20,}"), r"\1" + MASK),
    (re.compile(r"\b(xox[abposr]-)[A-Za-z0-9-]{10,}"), r"\1" + MASK),
    # AWS access key ids
    (re.compile(r"\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), r"\1" + MASK),
    # bearer credentials, in a header or a printed request
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + MASK),
    # NAME=value and "name": "value" where the name says it holds a secret (HF_TOKEN, api_key, DB_PASSWORD, ...)
    (
        re.compile(
            r"(?i)\b([A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|api_?key|access_?key|private_?key|_key)(?![a-z])[A-Za-z0-9_]*)"
            r"(\s*=\s*|[\"']?\s*:\s*[\"']|[\"']\s*,\s*[\"'])([^\s\"',;)}\[\]]{4,})(?=[\s\"',;)}\]]|$)"
        ),
        r"\1\2" + MASK,
    ),
)


def redact(text: str) -> str:
    """``text`` with every secret of a known shape replaced (idempotent; cheap when there is none)."""
    if not text:
        return text
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


def redact_all(value: Any) -> Any:
    """Every string in a JSON-like value (dicts, lists, tuples) redacted; keys are kept as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_all(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_all(item) for item in value]
    return value

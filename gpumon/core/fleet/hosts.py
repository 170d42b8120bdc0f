"""Host names as users write them (``gpu1``, ``alice@gpu2:2222``, ``[::1]:22``) and the ssh argv that reaches them.

The ssh program is the user's: ``--ssh 'ssh -J bastion'`` or ``GPUMON_SSH``, split
with ``shlex`` into an argv (never given to a shell), as rsync's ``-e`` and
``GIT_SSH_COMMAND`` do. Their ``~/.ssh/config``, keys, agent and jump hosts apply.
The remote command is quoted word by word (``shlex.join``): ssh joins its words
with spaces and hands them to the remote shell.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

#: The local machine, reached without ssh.
LOCAL = "local"
SSH_ENV = "GPUMON_SSH"
#: BatchMode: never prompt (a prompt would hang a background link); the rest bound a dead host's wait.
SSH_OPTIONS = (
    *("-o", "BatchMode=yes", "-o", "ConnectTimeout=10"),
    *("-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2"),
)

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")  # never starts with '-': no option injection
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


class HostError(ValueError):
    """A host name or fleet setting the user gave that cannot be used; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Host:
    """One machine of the fleet. ``name`` is what the user wrote and what the UI shows."""

    name: str
    address: str
    user: str | None = None
    port: int | None = None

    @property
    def local(self) -> bool:
        return self.address == LOCAL

    def target(self) -> list[str]:
        """ssh's words for this host: ``[-p PORT] -- [user@]address`` (``--`` ends ssh's options)."""
        where = f"{self.user}@{self.address}" if self.user else self.address
        return (["-p", str(self.port)] if self.port else []) + ["--", where]


def parse_host(text: str) -> Host:
    """``[user@]host[:port]`` (IPv6 as ``[addr]:port``), or ``local`` for this machine."""
    raw = text.strip()
    if raw == LOCAL:
        return Host(LOCAL, LOCAL)
    user, _, rest = raw.rpartition("@")
    port: int | None = None
    if rest.startswith("["):  # [v6]:port
        address, _, tail = rest[1:].partition("]")
        if tail and not tail.startswith(":"):
            raise HostError(f"host {text!r}: write an IPv6 address as [addr] or [addr]:port")
        port_text = tail[1:] if tail else ""
        if not re.fullmatch(r"[0-9A-Fa-f:.]+", address or "-"):
            raise HostError(f"host {text!r}: {address!r} is not an IPv6 address")
    else:
        address, _, port_text = rest.partition(":")
        if not _NAME.match(address):
            raise HostError(
                f"host {text!r}: a host name has letters, digits, '.', '-' and '_' only (e.g. gpu1 or alice@gpu2:2222)"
            )
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise HostError(f"host {text!r}: the port must be a number from 1 to 65535")
        port = int(port_text)
    if user and not _USER.match(user):
        raise HostError(f"host {text!r}: user {user!r} has letters, digits, '.', '-' and '_' only")
    return Host(raw, address, user or None, port)


def parse_hosts(text: str | list[str]) -> list[Host]:
    """A comma-separated list (or a list) of hosts, in order, without repeats."""
    words = text.split(",") if isinstance(text, str) else list(text)
    hosts: list[Host] = []
    for word in words:
        if not str(word).strip():
            continue
        host = parse_host(str(word))
        if host.name in {h.name for h in hosts}:
            continue
        hosts.append(host)
    if not hosts:
        raise HostError("no hosts given: list them as --hosts gpu1,gpu2 or in [fleet] hosts of the config file")
    return hosts


def ssh_program(explicit: str | None = None) -> list[str]:
    """The user's ssh as an argv: ``--ssh``, else ``$GPUMON_SSH``, else ``ssh``."""
    text = explicit if explicit is not None else os.environ.get(SSH_ENV) or "ssh"
    try:
        argv = shlex.split(text)
    except ValueError as err:
        raise HostError(f"ssh command {text!r}: {err}; quote it as in a shell, e.g. --ssh 'ssh -p 2222'") from None
    if not argv:
        raise HostError("the ssh command is empty: give --ssh 'ssh' or unset GPUMON_SSH")
    return argv


def ssh_argv(ssh: list[str], host: Host, remote: list[str]) -> list[str]:
    """The argv that runs ``remote`` (a list of words) on ``host`` through ``ssh``."""
    return [*ssh, *SSH_OPTIONS, *host.target(), shlex.join(remote)]


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """The ``[fleet]`` table of config.toml."""

    hosts: tuple[Host, ...] = ()
    ssh: str | None = None  # as the user wrote it; split by ssh_program
    gpumon: str = "gpumon"  # the remote command (a login shell's PATH may lack a venv)


def fleet_reach(ssh: str | None, config: FleetConfig, need_ssh: bool = True) -> tuple[list[str], list[str]]:
    """(the ssh argv, the gpumon command on the hosts), checked: the ssh is ``ssh`` (--ssh), else
    ``$GPUMON_SSH``, else ``[fleet] ssh``, else ssh; ``need_ssh``: it must be installed. Raises HostError."""
    explicit = ssh
    if explicit is None and not os.environ.get(SSH_ENV) and config.ssh:
        explicit = config.ssh
    argv = ssh_program(explicit)
    if need_ssh and shutil.which(argv[0]) is None:
        raise HostError(f"ssh program {argv[0]!r} not found: install OpenSSH or give --ssh 'PATH/TO/ssh'")
    try:
        gpumon = shlex.split(config.gpumon)
    except ValueError as err:
        raise HostError(f'[fleet] gpumon = {config.gpumon!r}: {err}; e.g. gpumon = "~/venv/bin/gpumon"') from None
    if not gpumon:
        raise HostError('[fleet] gpumon is empty: give the command on the hosts, e.g. gpumon = "gpumon"')
    return argv, gpumon


def fleet_config_path() -> Path:
    from gpumon.core.config import config_path

    return config_path()


def load_fleet_config(path: Path | None = None) -> FleetConfig:
    """``[fleet] hosts = [...]``, ``ssh = "..."``, ``gpumon = "..."``; a missing file is an empty fleet."""
    from gpumon.core.config import ConfigError, read_config  # here: `gpumon snapshot --watch` reads no config

    path = path or fleet_config_path()
    try:
        data = read_config(path)  # a FIFO or a directory there is a one-line mistake, never a wait
    except ConfigError as err:
        raise HostError(str(err)) from None
    if not data:
        return FleetConfig()
    table = data.get("fleet", {})
    if not isinstance(table, dict):
        raise HostError(f'{path}: [fleet] must be a table, e.g. hosts = ["gpu1", "gpu2"]')
    hosts = table.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise HostError(f'{path}: [fleet] hosts must be a list of strings, e.g. hosts = ["gpu1", "alice@gpu2:2222"]')
    for key in ("ssh", "gpumon"):
        if key in table and not isinstance(table[key], str):
            raise HostError(f'{path}: [fleet] {key} must be a string, e.g. {key} = "{key}"')
    try:
        parsed = tuple(parse_hosts(hosts)) if hosts else ()
    except HostError as err:
        raise HostError(f"{path}: {err}") from None
    return FleetConfig(parsed, table.get("ssh"), table.get("gpumon", "gpumon"))

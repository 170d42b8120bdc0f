"""Names for the containers and pods a cgroup path gives by id (core/owners.py), where this machine says them.

- Kubernetes: the kubelet links each container's log as ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``
  and keeps ``/var/log/pods/<namespace>_<pod>_<uid>/``: the names without the kubelet's gRPC pod-resources API.
- Docker and Podman: their HTTP API on a unix socket (``GET /containers/<id>/json``; Podman answers Docker's
  API), where the socket is readable (root, or the docker group). ``DOCKER_HOST=unix://...`` moves Docker's.

A socket is asked with a bounded timeout on the sampler's thread, once per container; a miss is asked again
after ``RETRY_S``. containerd's own socket speaks gRPC only: its containers outside Kubernetes go by id.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 0.5  # a hung daemon delays one sample at most this long per container
RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class Names:
    container: str | None = None
    pod: str | None = None
    namespace: str | None = None


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def socket_container_name(path: str, container_id: str, timeout: float = TIMEOUT_S) -> str | None:
    """The container's name from a Docker-API socket; None when the socket is absent, refuses or does not know it."""
    conn = _UnixHTTP(path, timeout)
    try:
        conn.request("GET", f"/containers/{container_id}/json")
        response = conn.getresponse()
        body = response.read(1 << 20)
        if response.status != 200:
            return None
        name = json.loads(body).get("Name")
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        return None
    finally:
        conn.close()
    return (name.lstrip("/") or None) if isinstance(name, str) else None


class ContainerNames:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._known: dict[str, tuple[Names, float]] = {}  # container id or pod uid -> (names, when read)

    def sockets(self, runtime: str | None) -> list[str]:
        docker = os.environ.get("DOCKER_HOST", "")
        default = str(self.root / "var/run/docker.sock")
        docker_path = docker[len("unix://") :] if docker.startswith("unix://") else default
        podman_path = str(self.root / "run/podman/podman.sock")
        by_runtime = {"docker": [docker_path], "podman": [podman_path], None: [docker_path, podman_path]}
        return by_runtime.get(runtime, [])

    def lookup(self, container_id: str | None, runtime: str | None, pod_uid: str | None) -> Names:
        key = container_id or pod_uid
        if key is None:
            return Names()
        cached = self._known.get(key)
        now = time.monotonic()
        if cached is not None and (cached[0] != Names() or now - cached[1] < RETRY_S):
            return cached[0]
        names = self._read(container_id, runtime, pod_uid)
        self._known[key] = (names, now)
        return names

    def _read(self, container_id: str | None, runtime: str | None, pod_uid: str | None) -> Names:
        if container_id is not None:
            logged = self._kubelet_container(container_id)
            if logged is not None:
                return logged
        pod, namespace = self._kubelet_pod(pod_uid) if pod_uid else (None, None)
        container = None
        if container_id is not None and pod_uid is None:
            asked = (socket_container_name(path, container_id) for path in self.sockets(runtime))
            container = next(filter(None, asked), None)
        return Names(container, pod, namespace)

    def _kubelet_container(self, container_id: str) -> Names | None:
        suffix = f"-{container_id}.log"
        for entry in _listdir(self.root / "var/log/containers"):
            if entry.endswith(suffix):
                parts = entry[: -len(suffix)].split("_", 2)  # pod and namespace names hold no '_'
                if len(parts) == 3:
                    return Names(container=parts[2], pod=parts[0], namespace=parts[1])
        return None

    def _kubelet_pod(self, pod_uid: str) -> tuple[str | None, str | None]:
        suffix = f"_{pod_uid}"
        for entry in _listdir(self.root / "var/log/pods"):
            if entry.endswith(suffix):
                parts = entry[: -len(suffix)].split("_", 1)
                if len(parts) == 2:
                    return parts[1], parts[0]
        return None, None


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []

"""Issue 24 item 4: memory is projected against the ceiling that applies to the rank, and the doctor names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.doctor import Context, advise, classify
from gpumon.core.doctor.ceiling import choose
from gpumon.core.doctor.leak import LeakWatch
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.telemetry.limits import cgroup_limit

GiB = 1024**3
MiB = 1024**2
DATA = Path(__file__).parent / "data" / "errors"


def test_the_lowest_limit_is_the_ceiling_and_is_named() -> None:
    host = int(23.5 * GiB)
    assert choose({}, host).describe() == "the host's 23.5 GiB"  # type: ignore[union-attr]
    assert choose(None, None) is None
    cgroup = choose({"cgroup": 8 * GiB, "cgroup_file": "memory.max", "host": host})
    assert cgroup is not None and cgroup.bytes == 8 * GiB and cgroup.describe() == "the cgroup's memory.max 8.0 GiB"
    both = choose({"as": 3 * GiB, "data": 6 * GiB, "cgroup": 8 * GiB, "cgroup_file": "memory.max", "host": host})
    assert both is not None and both.source == "as" and both.is_limit
    assert both.describe().startswith("RLIMIT_AS 3.0 GiB (the address-space limit")
    data = choose({"as": 9 * GiB, "data": 2 * GiB, "host": host})
    assert data is not None and data.name == "RLIMIT_DATA" and data.bytes == 2 * GiB
    # A limit above the host's memory is no ceiling: the host is.
    assert choose({"cgroup": 64 * GiB, "host": host}).source == "host"  # type: ignore[union-attr]
    # RLIMIT_AS counts what was mapped before the heap grew (torch's libraries): the heap's room is the rest.
    mapped = choose({"as": 3 * GiB, "vm": GiB + 100 * MiB, "host": host}, heap=100 * MiB)
    assert mapped is not None and mapped.bytes == 2 * GiB and mapped.limit == 3 * GiB
    assert "1.0 GiB of it mapped at the start" in mapped.describe()


def test_the_cgroup_limit_is_read_from_v2_then_v1_and_from_parents(tmp_path: Path) -> None:
    job = tmp_path / "slurm" / "job_1" / "step_0"
    job.mkdir(parents=True)
    (job / "memory.max").write_text("max\n")
    (job.parent / "memory.max").write_text(f"{8 * GiB}\n")  # the job's limit binds its steps
    assert cgroup_limit("0::/slurm/job_1/step_0\n", tmp_path) == (8 * GiB, "memory.max")
    assert cgroup_limit("0::/gone\n", tmp_path) is None
    v1 = tmp_path / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{4 * GiB}\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    assert cgroup_limit("4:memory:/docker/abc\n0::/\n", tmp_path) == (4 * GiB, "memory.limit_in_bytes")


def cpu_steps(limits: dict, per_step: int = 16 * MiB, steps: int = 80) -> LeakWatch:
    telemetry = RunTelemetry(Path("/nonexistent"))
    watch = LeakWatch()
    watch.update(telemetry)
    telemetry.watch = watch
    telemetry.apply({"type": "proc_start", "src": "rank0", "pid": 1, "limits": limits})
    for step in range(1, steps + 1):
        heap = 100 * MiB + step * per_step
        telemetry.apply({"type": "step", "src": "rank0", "t": step / 10, "step": step, "dev": "cpu", "heap": heap})
    return watch


def test_a_cpu_rank_is_projected_against_its_limit_not_the_host() -> None:
    limited = cpu_steps({"as": 3 * GiB, "vm": 600 * MiB, "host": int(23.5 * GiB)}).states()[0]
    # 3 GiB less 600 MiB mapped at the first step (heap 116 MiB then): the heap reaches ~2.5 GiB at step ~160.
    assert limited.warning and limited.runs_out_at is not None and 140 <= limited.runs_out_at <= 170
    assert "against RLIMIT_AS 3.0 GiB (the address-space limit" in limited.describe()
    host = cpu_steps({"host": int(23.5 * GiB)}).states()[0]
    assert host.runs_out_at is not None and host.runs_out_at > 1400
    assert "against the host's 23.5 GiB" in host.describe()


def test_host_oom_advice_leads_with_the_census_and_the_limit_and_drops_workers_it_has_not() -> None:
    failure = classify("Traceback (most recent call last):\nMemoryError\n")
    held = "`cache` in leak.py:12 keeps a growing collection of tensors on cpu: +61 tensors (1.9 GiB) in 61 steps"
    ctx = Context(held=held, held_fix="reduce each batch to numbers", ceiling="RLIMIT_AS 3.0 GiB",
                  ceiling_source="as", workers=False)  # fmt: skip
    items = advise(failure, ctx)
    keys = [a.key for a in items]
    assert keys[0] == "census_holder" and "`cache` in leak.py:12" in items[0].why
    assert "memory_limit" in keys and "prlimit --as" in items[keys.index("memory_limit")].change
    assert "dataloader_workers" not in keys
    unknown = advise(failure, Context())
    workers = next(a for a in unknown if a.key == "dataloader_workers")
    assert workers.title.startswith("If the run uses DataLoader workers")
    assert "dataloader_workers" not in [a.key for a in advise(failure, Context(num_workers=0))]


LEAKY = """
import time
import torch

model = torch.nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
cache = []
for step in range(100000):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    cache.append(torch.ones(4 * 1024 * 1024))  # 16 MiB a step, never freed
    time.sleep(0.01)
"""
# The run's command: caps its own memory, then becomes the plain leaking script (the rlimit is inherited by exec).
LIMITED = """
import os, sys
kind, limit, script = sys.argv[1:4]
if kind == "as":
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (int(limit), resource.RLIM_INFINITY))
else:  # a cgroup directory: join it
    with open(os.path.join(kind, "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
os.execv(sys.executable, [sys.executable, script])
"""


def run_limited(tmp_path: Path, kind: str, limit: int) -> dict:
    """Launch the leaking script under a limit through gpumon, wait for it to die, and ask the doctor."""
    pytest.importorskip("torch")
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch, wait

    (tmp_path / "leaky.py").write_text(LEAKY)
    (tmp_path / "limited.py").write_text(LIMITED)
    home = tmp_path / "home"
    os.environ["GPUMON_HOME"] = str(home)
    try:
        store = RunStore()
        args = (kind, str(limit), str(tmp_path / "leaky.py"))
        spec = RunSpec(kind="script", program=str(tmp_path / "limited.py"), args=args, env=(("OMP_NUM_THREADS", "1"),))
        record = wait(launch(spec, store, 0), store, timeout=240)
        env = {**os.environ}
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "doctor", record.id, "--json"], capture_output=True, text=True, env=env
        )
    finally:
        os.environ.pop("GPUMON_HOME", None)
    assert record.state == "failed", record.state
    return json.loads(done.stdout)


def test_a_script_under_rlimit_as_is_projected_against_its_limit_and_the_doctor_names_it(tmp_path: Path) -> None:
    report = run_limited(tmp_path, "as", 3 * GiB)
    memory = report["memory"]["0"]
    assert memory["ceiling"].startswith("RLIMIT_AS 3.0 GiB (the address-space limit"), memory
    assert memory["trend"] == "leak" or memory["state"] == "leak"
    died = memory["step"]  # the last step it reached
    # Projected near where it died (not at the host's ~1,500 steps of 16 MiB): within a quarter.
    assert 0.75 * died <= memory["runs_out_at"] <= 1.25 * died, (died, memory["runs_out_at"])
    assert report["failure"]["kind"] == "host_oom", report["failure"]
    keys = [a["key"] for a in report["advice"]]
    assert "memory_limit" in keys and "RLIMIT_AS 3.0 GiB" in report["advice"][keys.index("memory_limit")]["why"]
    assert "dataloader_workers" not in keys  # the script has no workers, and gpumon saw none
    if report["causes"]:  # the supervisor's census landed before the crash: it leads
        assert keys[0] == "census_holder" and "cache" in report["advice"][0]["why"]
        assert "the last census named" in report["headline"]


def _writable_cgroup() -> Path | None:
    root = Path("/sys/fs/cgroup")
    if not (root / "cgroup.controllers").exists():
        return None
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        path = next(line.split("::", 1)[1] for line in own if line.startswith("0::"))
        parent = root / path.strip("/")
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            return None
        child = parent / f"gpumon-test-{os.getpid()}"
        child.mkdir()
        return child
    except (OSError, StopIteration):
        return None


def test_a_script_in_a_cgroup_is_projected_against_its_memory_max(tmp_path: Path) -> None:
    cgroup = _writable_cgroup()
    if cgroup is None:
        pytest.skip("no cgroup v2 with the memory controller that this user may create a child cgroup in")
    try:
        (cgroup / "memory.max").write_text(str(2 * GiB))
        if (cgroup / "memory.swap.max").exists():
            (cgroup / "memory.swap.max").write_text("0")  # no swap: the limit is the limit
        report = run_limited(tmp_path, str(cgroup), 2 * GiB)
        memory = report["memory"]["0"]
        assert memory["ceiling"] == "the cgroup's memory.max 2.0 GiB", memory
        assert memory["runs_out_at"] <= 1.5 * memory["step"], memory
    finally:
        cgroup.rmdir()

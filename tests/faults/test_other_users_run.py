"""Another user's run in a shared state dir (issue 49 item 11): ``gpumon alerts`` lists the rest and names the run
it could not read; the doctor says its files cannot be read, not that no process stepped.

Root reads every file, so the commands run as root without the capabilities that let it (``setpriv`` drops
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH): a run folder of uid 65534, mode 0700, is then another user's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import wait_ended, wait_until

SETPRIV = shutil.which("setpriv")
DROP = "-dac_override,-dac_read_search"
pytestmark = pytest.mark.skipif(
    SETPRIV is None or os.geteuid() != 0, reason="needs root and setpriv (util-linux) to act as another user"
)


def _gpumon(home: Path, *args: str, unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = [SETPRIV or "setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}"] if unprivileged else []
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([*prefix, sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True,
                          cwd=home.parent, timeout=120)  # fmt: skip


def test_alerts_list_the_readable_runs_and_the_doctor_says_why_it_cannot_read_the_other(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = tmp_path / "fail.py"
    script.write_text('import sys\nsys.exit("shard 7 is corrupt")\n')
    ids = []
    for _ in range(2):
        done = _gpumon(home, "launch", "script", str(script))
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.split()[-1])
    mine, theirs = ids
    wait_ended(home, mine, theirs)
    for run_id in ids:  # its supervisor gone too: it packs the events after writing the end
        pid = json.loads((home / "runs" / run_id / "status.json").read_text())["supervisor_pid"]
        assert wait_until(lambda pid=pid: not psutil.pid_exists(pid), timeout=60)
    for path in [home / "runs" / theirs, *(home / "runs" / theirs).rglob("*")]:
        os.chown(path, 65534, 65534, follow_symlinks=False)
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)
    alerts = _gpumon(home, "alerts", unprivileged=True)
    assert alerts.returncode == 0, alerts.stderr
    assert mine in alerts.stdout and "shard 7 is corrupt" in alerts.stdout, alerts.stdout
    assert f"could not read the alerts of {theirs}: Permission denied" in alerts.stderr, alerts.stderr
    doctor = _gpumon(home, "doctor", theirs, unprivileged=True)
    assert doctor.returncode == 0, doctor.stderr
    assert "cannot be read by this user (they belong to uid 65534)" in doctor.stdout, doctor.stdout
    assert "no process of the run stepped" not in doctor.stdout

"""The Flower example (examples/flower) as a Flower 1.41 app: ``flwr run`` on a local
simulation SuperLink at small size prints the result table and little else; the client id is
read by the strategy and not averaged into the metrics.

The test starts its own SuperLink (simulation runtime, no runtime dependency installation) on a
free port, under a temporary ``FLWR_HOME`` whose Flower configuration names it, runs
``flwr run <app> --stream`` against it, and stops it (its process group) afterwards: nothing
outside the machine is reached, and nothing of the user's ``~/.flwr`` is touched."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")
pytest.importorskip("sklearn")

APP = Path(__file__).resolve().parents[2] / "examples" / "flower"
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable}")
    return str(path)


def _wait_until_up(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"flower-superlink exited ({proc.returncode}):\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"flower-superlink did not start within {timeout} s:\n{log.read_text()}")


@pytest.fixture
def superlink(tmp_path):
    """A local simulation SuperLink of this test's own: (environment for flwr, its name)."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{port}"\n'
        "insecure = true\n")
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = tmp_path / "superlink.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [_tool("flower-superlink"), "--insecure", "--simulation", "--isolation",
             "subprocess", "--host", "127.0.0.1", "--port", str(port),
             "--disable-runtime-dependency-installation"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: stopped with all it started
    try:
        _wait_until_up(port, proc, log)
        yield env, "test"
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Stops the process group that ``proc`` leads (the SuperLink and the simulation it
    started): SIGTERM, then SIGKILL for what is left after ``timeout`` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)  # anyone of the group left?
        except ProcessLookupError:
            return
        time.sleep(0.3)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def test_flwr_run_prints_the_table_quietly(superlink):
    env, name = superlink
    before = sorted(p.name for p in APP.rglob("*") if "__pycache__" not in p.parts)
    done = subprocess.run(
        [_tool("flwr"), "run", str(APP), name, "--stream",
         "--run-config", "num-server-rounds=2 per-round=2 rules='fedavg,aaggff-d'",
         "--federation-config", "num-supernodes=4 client-resources-num-cpus=1"],
        env=env, capture_output=True, text=True, timeout=240, check=False)
    out = done.stdout + done.stderr
    print(out)  # shown with -s, or on failure
    assert done.returncode == 0, out
    assert "mean acc" in out and "worst 10%" in out, out
    rows = [line.split()[0] for line in out.splitlines()
            if line.split() and line.split()[0] in ("fedavg", "aaggff-d")]
    assert rows == ["fedavg", "aaggff-d"], out
    assert "over 4 clients after 2 rounds of 2" in out, out
    # Quiet: no round-by-round logs, no averaged metrics, no expected warnings.
    assert "[ROUND" not in out and "partition-id" not in out, out
    assert "Federated evaluation will be skipped" not in out, out
    assert len(out.splitlines()) < 40, out
    # flwr run leaves the app folder as it was (no migrated configuration, no lock file).
    assert sorted(p.name for p in APP.rglob("*") if "__pycache__" not in p.parts) == before


def test_partition_id_is_read_but_not_averaged(monkeypatch):
    from flwr.app import MetricRecord, RecordDict

    monkeypatch.syspath_prepend(str(APP))
    from fairness_digits.server_app import CLIENT_ID_KEY, rule_names, train_metrics

    replies = [RecordDict({"metrics": MetricRecord({"num-examples": n, CLIENT_ID_KEY: pid,
                                                     "fastfair-received-loss": loss})})
               for n, pid, loss in ((10, 3, 1.0), (30, 7, 2.0))]
    metrics = train_metrics(replies, "num-examples")
    assert CLIENT_ID_KEY not in metrics
    assert metrics["fastfair-received-loss"] == pytest.approx(1.75)
    assert rule_names(" fedavg, term ") == ["fedavg", "term"]
    with pytest.raises(ValueError, match="run config 'rules' must name distinct rules"):
        rule_names("fedavg,nope")

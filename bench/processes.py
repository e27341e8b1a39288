"""Subprocesses the bench starts (gunicorn, celery workers) and stops again, by their own pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], *, log_name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    log_dir = ROOT / "bench" / "results"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"{log_name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    env = {**os.environ, **(extra_env or {})}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process group we started (gunicorn/celery children included), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def wait_http(port: int, path: str = "/healthz", timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    import http.client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} (see bench/results/*.log)")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing answered on 127.0.0.1:{port}{path} within {timeout}s")

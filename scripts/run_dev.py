"""`make run`: the whole product on one machine with nothing but Python.

SQLite file and a filesystem Celery broker under var/ (or $LEDGERFLOW_VAR_DIR) unless DATABASE_URL /
CELERY_BROKER_URL say otherwise. Starts: web (gunicorn), a Celery worker, Celery beat (outbox and timer sweeps), the
sandbox payment provider and a demo print station printing into var/prints/. Prints the console
URL, a login and an API key. Ctrl-C stops everything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The same folder config/settings.py uses (SQLite file, broker, static files), so logs and prints land
# next to them and the broker folders exist before the first process starts.
VAR = Path(os.environ.get("LEDGERFLOW_VAR_DIR") or ROOT / "var").resolve()
PY = sys.executable
WEB_PORT = int(os.environ.get("PORT", "8000"))
SANDBOX_PORT = int(os.environ.get("SANDBOX_PORT", "12111"))
DEMO_USER, DEMO_PASSWORD = "operator", "ledgerflow-demo"
SUPPORT_USER, SUPPORT_PASSWORD = "support", "ledgerflow-demo"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    e["LEDGERFLOW_VAR_DIR"] = str(VAR)
    e.setdefault("DJANGO_DEBUG", "1")
    e.setdefault("PAYMENT_PROVIDER", "sandbox")
    e.setdefault("STRIPE_API_BASE", f"http://127.0.0.1:{SANDBOX_PORT}")
    e.setdefault("STRIPE_API_KEY", "sk_test_sandbox")
    e.setdefault("STRIPE_WEBHOOK_SECRET", "whsec_sandbox")
    e.setdefault("OUTBOX_SWEEP_SECONDS", "2")
    e.setdefault("TIMER_SWEEP_SECONDS", "2")
    e.setdefault("PYTHONUNBUFFERED", "1")
    return e


def manage(*args: str, capture: bool = False) -> str:
    result = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env(), check=True,
                            capture_output=capture, text=True)
    return result.stdout if capture else ""


def has_command(name: str) -> bool:
    out = manage("help", "--commands", capture=True)
    return name in out.split()


def start(name: str, cmd: list[str], procs: list[tuple[str, subprocess.Popen]]) -> None:
    log = open(VAR / "logs" / f"{name}.log", "a")  # noqa: SIM115 - lives as long as the process
    procs.append((name, subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)))


def wait_http(url: str, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - loopback only
                return True
        except Exception:  # noqa: BLE001
            time.sleep(0.3)
    return False


def main() -> None:
    for sub in ("logs", "prints", "broker/out", "broker/processed"):
        (VAR / sub).mkdir(parents=True, exist_ok=True)
    print("Preparing the database …", flush=True)
    manage("migrate", "--noinput", "-v", "0")
    manage("collectstatic", "--noinput", "-v", "0")

    if has_command("create_console_user"):
        manage("create_console_user", "--username", DEMO_USER, "--password", DEMO_PASSWORD, "--role", "operator",
               "--update")
        manage("create_console_user", "--username", SUPPORT_USER, "--password", SUPPORT_PASSWORD,
               "--role", "support", "--update")
    api_key = manage("create_api_key", "--name", f"demo-{int(time.time())}", "--scopes", "*", capture=True).strip()

    procs: list[tuple[str, subprocess.Popen]] = []
    if has_command("run_sandbox_provider"):
        start("sandbox", [PY, "manage.py", "run_sandbox_provider", "--port", str(SANDBOX_PORT),
                          "--webhook-url", f"http://127.0.0.1:{WEB_PORT}/api/v1/webhooks/payments/stripe",
                          "--webhook-secret", env()["STRIPE_WEBHOOK_SECRET"]], procs)
    start("web", [PY, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{WEB_PORT}", "--workers", "2",
                  "--threads", "4", "--timeout", "60"], procs)
    start("worker", [PY, "-m", "celery", "-A", "config", "worker", "--pool=threads", "--concurrency", "2",
                     "-l", "INFO"], procs)
    start("beat", [PY, "-m", "celery", "-A", "config", "beat", "-s", str(VAR / "celerybeat-schedule"),
                   "-l", "INFO"], procs)

    if not wait_http(f"http://127.0.0.1:{WEB_PORT}/healthz"):
        print(f"web did not come up; see {VAR / 'logs' / 'web.log'}", file=sys.stderr)

    if has_command("seed_demo"):
        print("Loading demo data …", flush=True)
        manage("seed_demo")
    if has_command("create_station"):
        station = json.loads(manage("create_station", "--name", f"demo-station-{int(time.time())}",
                                    capture=True).strip().splitlines()[-1])
        start("station", [PY, "-m", "printing.station", "--api", f"http://127.0.0.1:{WEB_PORT}",
                          "--token", station["token"], "--ledger", str(VAR / "station-ledger.sqlite3"),
                          "--output", f"dir:{VAR / 'prints'}"], procs)

    print(f"""
Ledgerflow is running.

  Console     http://127.0.0.1:{WEB_PORT}/console/
              operator login: {DEMO_USER} / {DEMO_PASSWORD}    support login: {SUPPORT_USER} / {SUPPORT_PASSWORD}
  API docs    http://127.0.0.1:{WEB_PORT}/api/v1/docs
  API key     {api_key}
  Health      http://127.0.0.1:{WEB_PORT}/healthz
  Logs        {VAR / 'logs'}/   Prints: {VAR / 'prints'}/

Ctrl-C stops everything.
""", flush=True)

    def stop(*_):
        for _, proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while True:
        for name, proc in procs:
            if proc.poll() is not None:
                print(f"{name} exited with {proc.returncode}; see {VAR / 'logs' / name}.log", file=sys.stderr)
                procs.remove((name, proc))
                break
        time.sleep(1)


if __name__ == "__main__":
    main()

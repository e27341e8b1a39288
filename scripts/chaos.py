"""`make chaos`: the full stack under load while workers are killed, PostgreSQL restarts and the
provider drops acknowledgements; then, once the backlog drains, nothing lost and nothing done twice.

Loopback only. Starts, against its own PostgreSQL database (``ledgerflow_chaos_<folder>``) and its own
Celery queue on Redis: gunicorn, two Celery workers, beat, the sandbox provider (webhooks to gunicorn,
duplicated; faults injected), and a print station writing into a folder. For ``--seconds`` it drives
checkouts, cancellations (some racing the capture), retries after failures, warehouse events and print
jobs over the API, while it SIGKILLs a random worker every few seconds (and starts it again), restarts
PostgreSQL once (``pg_ctlcluster --skip-systemctl-redirect 15 main restart``), arms provider faults
(dropped answers, 500s, a capture winning against a void) and holds then releases webhooks in reverse.

Then it waits for the backlog to drain and checks, printing the counts:
* every order, attempt, refund and print job is terminal or in an explained waiting state;
* the sandbox ledger: at most one capture and one live refund per intent, never more refunded than
  captured, one intent per local attempt;
* no outbox promise lost: each is delivered or dead with its error, none delivered twice;
* the invariant audit (orders) and every machine's history replay are clean.

Exit status 0 only when all hold. ``--seconds`` (default 150) bounds the load; the whole run stays
well under ten minutes on a fresh clone (migrations included).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TAG = "".join(c if c.isalnum() else "_" for c in ROOT.name.lower())
WEBHOOK_SECRET = "whsec_chaos"  # noqa: S105 - a loopback test device's secret
SANDBOX_KEY = "sk_test_chaos"


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- HTTP ----------------------------------------------------------------------------------------
class Http:
    def __init__(self, base: str, key: str | None = None) -> None:
        self.base, self.key = base, key

    def call(self, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310 - loopback
        request.add_header("Content-Type", "application/json")
        if self.key:
            request.add_header("Authorization", f"Bearer {self.key}")
        for k, v in (headers or {}).items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw)
            except ValueError:
                return error.code, {"raw": raw[:300].decode(errors="replace")}


# --- the stack -----------------------------------------------------------------------------------
class Stack:
    def __init__(self, workdir: Path, seconds: int) -> None:
        self.workdir = workdir
        self.web_port, self.sandbox_port = free_port(), free_port()
        self.db_name = f"ledgerflow_chaos_{TAG}"
        self.queue = f"ledgerflow-chaos-{TAG}-{uuid.uuid4().hex[:6]}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.prints = workdir / "prints"
        self.prints.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "chaos-" + uuid.uuid4().hex,
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{self.db_name}",
            "CELERY_BROKER_URL": os.environ.get("CHAOS_BROKER_URL", "redis://127.0.0.1:6379/14"),
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "PAYMENT_PROVIDER": "sandbox",
            "STRIPE_API_BASE": f"http://127.0.0.1:{self.sandbox_port}",
            "STRIPE_API_KEY": SANDBOX_KEY,
            "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "STRIPE_TIMEOUT_SECONDS": "5",
            "OUTBOX_SWEEP_SECONDS": "2",
            "TIMER_SWEEP_SECONDS": "2",
            "PYTHONUNBUFFERED": "1",
        }

    # database
    def create_database(self) -> None:
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
        self.manage("migrate", "--noinput", "-v", "0")

    def manage(self, *args: str) -> str:
        done = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, check=True, capture_output=True,
                              text=True)
        return done.stdout

    # processes
    def start(self, name: str, cmd: list[str]) -> None:
        logfile = open(self.workdir / f"{name}.log", "a")  # noqa: SIM115 - lives as long as the process
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=logfile, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def start_worker(self, name: str) -> None:
        self.start(name, [PY, "-m", "celery", "-A", "config", "worker", "-Q", self.queue, "-n", f"{name}@{TAG}",
                          "--pool=threads", "--concurrency", "4", "--without-gossip", "--without-mingle",
                          "-l", "WARNING"])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(15)

    def start_all(self) -> tuple[str, str]:
        web = f"http://127.0.0.1:{self.web_port}"
        self.start("sandbox", [PY, "-m", "payments.sandbox", "--port", str(self.sandbox_port),
                               "--db", str(self.workdir / "sandbox.sqlite3"), "--api-key", SANDBOX_KEY,
                               "--webhook-url", f"{web}/api/v1/webhooks/payments/sandbox",
                               "--webhook-secret", WEBHOOK_SECRET, "--webhook-retry-base-seconds", "0.5"])
        self.start("web", [PY, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{self.web_port}",
                           "--workers", "3", "--threads", "4", "--timeout", "60"])
        self.start_worker("worker1")
        self.start_worker("worker2")
        self.start("beat", [PY, "-m", "celery", "-A", "config", "beat", "-s",
                            str(self.workdir / "celerybeat-schedule"), "-l", "WARNING"])
        wait_http(f"{web}/healthz")
        wait_http(f"http://127.0.0.1:{self.sandbox_port}/_sandbox/health")
        api_key = self.manage("create_api_key", "--name", "chaos-load", "--scopes", "*").strip().splitlines()[-1]
        station = json.loads(self.manage("create_station", "--name", "chaos-station").strip().splitlines()[-1])
        self.start("station", [PY, "-m", "printing.station", "--api", web, "--token", station["token"],
                               "--ledger", str(self.workdir / "station-ledger.sqlite3"),
                               "--output", f"dir:{self.prints}", "--poll-wait", "2", "--heartbeat-seconds", "5"])
        self.station_id = station["station_id"]
        return web, api_key

    def stop_all(self) -> None:
        for name in list(self.procs):
            try:
                self.kill(name, signal.SIGTERM)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.kill(name, signal.SIGKILL)
        try:  # the run's own queue (and its unacked copies) leave the shared Redis with it
            import redis

            client = redis.Redis.from_url(self.env["CELERY_BROKER_URL"])
            client.delete(self.queue, *client.keys(f"{self.queue}*"))
        except Exception as exc:  # noqa: BLE001 - cleanup only
            log(f"could not delete the queue {self.queue}: {exc}")


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - loopback
                return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.3)
    raise RuntimeError(f"{url} never answered")


# --- load ------------------------------------------------------------------------------------------
class Load:
    def __init__(self, api: Http, station_id: int, until: float) -> None:
        self.api, self.station_id, self.until = api, station_id, until
        self.orders: list[int] = []
        self.jobs: list[int] = []
        self.lock = threading.Lock()
        self.counts: collections.Counter = collections.Counter()
        self.errors: list[str] = []
        self.retry_refusals: list[str] = []  # 4xx answers to a command retried after a 5xx

    def note(self, what: str, status: int, body) -> None:
        with self.lock:
            self.counts[f"{what}:{status // 100}xx" if status else f"{what}:connection_error"] += 1
            if status >= 500 or status == 0:
                self.errors.append(f"{what} {status} {str(body)[:300]}")

    def call(self, what: str, method: str, path: str, body=None, headers=None):
        """One API call. A command with an Idempotency-Key is retried on 5xx or a dropped connection
        with the same key, as a careful client does (e.g. while PostgreSQL restarts)."""
        retries = 4 if headers and "Idempotency-Key" in headers else 0
        for attempt in range(retries + 1):
            try:
                status, answer = self.api.call(method, path, body, headers)
            except Exception as exc:  # noqa: BLE001 - connection refused/reset while PostgreSQL restarts
                status, answer = 0, {"error": str(exc)}
            self.note(what, status, answer)
            if status and status < 500:
                if attempt:
                    with self.lock:
                        recovered = status < 400
                        self.counts["commands_recovered_by_retry" if recovered else "commands_refused_on_retry"] += 1
                        if not recovered:
                            self.retry_refusals.append(f"{what} {status} {str(answer)[:300]}")
                return status, answer
            if attempt < retries:
                time.sleep(1)
        if retries:
            with self.lock:
                self.counts["commands_failed_after_retries"] += 1
        return status, answer

    def setup(self) -> None:
        self.skus = []
        for i, price in enumerate((1500, 4200, 9900)):
            sku = f"CHAOS-{i}"
            self.call("product", "POST", "/api/v1/products", {"sku": sku, "name": f"Chaos {i}", "unit_price": price,
                                                              "currency": "usd", "stock_on_hand": 100000})
            self.skus.append(sku)

    def checkout(self, rng: random.Random) -> None:
        status, cart = self.call("cart", "POST", "/api/v1/carts")
        if status != 201:
            return
        self.call("cart_item", "POST", f"/api/v1/carts/{cart['id']}/items",
                  {"sku": rng.choice(self.skus), "quantity": rng.randint(1, 3)})
        key = uuid.uuid4().hex
        status, order = self.call("checkout", "POST", "/api/v1/checkout", {"cart_id": cart["id"]},
                                  {"Idempotency-Key": key})
        if rng.random() < 0.15:  # the client did not hear the answer and sends the same command again
            self.call("checkout_repeat", "POST", "/api/v1/checkout", {"cart_id": cart["id"]},
                      {"Idempotency-Key": key})
        if status == 201:
            with self.lock:
                self.orders.append(order["id"])
            if rng.random() < 0.2:  # cancel at once: races the authorization and capture
                self.call("cancel_racing", "POST", f"/api/v1/orders/{order['id']}/cancel", {"reason": "changed mind"},
                          {"Idempotency-Key": uuid.uuid4().hex})

    def pick_order(self, rng: random.Random) -> int | None:
        with self.lock:
            return rng.choice(self.orders) if self.orders else None

    def cancel(self, rng: random.Random) -> None:
        order_id = self.pick_order(rng)
        if order_id:
            self.call("cancel", "POST", f"/api/v1/orders/{order_id}/cancel", {"reason": "later cancel"},
                      {"Idempotency-Key": uuid.uuid4().hex})

    def warehouse(self, rng: random.Random) -> None:
        order_id = self.pick_order(rng)
        if not order_id:
            return
        status, order = self.call("order_get", "GET", f"/api/v1/orders/{order_id}")
        if status != 200:
            return
        nxt = {"paid": "fulfillment_accepted", "fulfillment_pending": "shipped", "shipped": "delivery_confirmed"}
        event = nxt.get(order["state"]) or rng.choice(list(nxt.values()))
        self.call("warehouse", "POST", f"/api/v1/orders/{order_id}/events",
                  {"type": event, "identity": f"wh-{uuid.uuid4().hex}", "payload": {}})
        if order["state"] == "payment_failed":
            self.call("retry_payment", "POST", f"/api/v1/orders/{order_id}/payment-attempts", None,
                      {"Idempotency-Key": uuid.uuid4().hex})

    def print_job(self, rng: random.Random) -> None:
        status, job = self.call("print_job", "POST", "/api/v1/print-jobs",
                                {"station_id": self.station_id, "content_type": "text", "title": "chaos label",
                                 "content_base64": "bGVkZ2VyZmxvdyBjaGFvcyBsYWJlbAo=", "expires_in_seconds": 120},
                                {"Idempotency-Key": uuid.uuid4().hex})
        if status == 201:
            with self.lock:
                self.jobs.append(job["id"])
            if rng.random() < 0.2:
                self.call("print_cancel", "POST", f"/api/v1/print-jobs/{job['id']}/cancel")

    def run_thread(self, seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < self.until:
            r = rng.random()
            try:
                if r < 0.45:
                    self.checkout(rng)
                elif r < 0.55:
                    self.cancel(rng)
                elif r < 0.75:
                    self.warehouse(rng)
                else:
                    self.print_job(rng)
            except Exception as exc:  # noqa: BLE001 - the load must go on; recorded
                with self.lock:
                    self.errors.append(f"load exception {exc!r}")
            time.sleep(rng.uniform(0.05, 0.25))


# --- chaos -----------------------------------------------------------------------------------------
class Chaos:
    def __init__(self, stack: Stack, until: float, restart_pg_at: float | None, rng: random.Random) -> None:
        self.stack, self.until, self.restart_pg_at, self.rng = stack, until, restart_pg_at, rng
        self.sandbox = Http(f"http://127.0.0.1:{stack.sandbox_port}")
        self.counts: collections.Counter = collections.Counter()

    def fault(self) -> None:
        choice = self.rng.choice(["drop", "drop", "error", "capture_wins", "reverse", "duplicate"])
        if choice == "drop":  # the provider acts, then the connection closes unanswered
            self.sandbox.call("POST", "/_sandbox/faults", {"op": "*", "action": "drop_response", "times": 3})
        elif choice == "error":
            self.sandbox.call("POST", "/_sandbox/faults", {"op": "*", "action": "error", "status": 500, "times": 2})
        elif choice == "capture_wins":
            self.sandbox.call("POST", "/_sandbox/faults", {"op": "payment_intent.cancel", "action": "capture_wins"})
        elif choice == "reverse":  # hold webhooks a moment, then deliver them newest first
            self.sandbox.call("POST", "/_sandbox/webhooks", {"hold": True})
            time.sleep(1.5)
            self.sandbox.call("POST", "/_sandbox/webhooks/release", {"order": "reverse"})
            self.sandbox.call("POST", "/_sandbox/webhooks", {"hold": False})
        elif choice == "duplicate":
            self.sandbox.call("POST", "/_sandbox/webhooks", {"duplicate": self.rng.choice([0, 1, 2])})
        self.counts[f"fault:{choice}"] += 1

    def restart_postgres(self) -> None:
        log("restarting PostgreSQL")
        done = subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart"],
                              capture_output=True, text=True, check=False)
        self.counts["postgres_restart" if done.returncode == 0 else "postgres_restart_failed"] += 1
        if done.returncode:
            log(f"PostgreSQL restart failed: {done.stderr.strip()}")

    def run(self) -> None:
        while time.monotonic() < self.until:
            time.sleep(self.rng.uniform(2, 5))
            victim = self.rng.choice(["worker1", "worker2"])
            self.stack.kill(victim)
            self.counts["worker_sigkill"] += 1
            self.fault()
            time.sleep(self.rng.uniform(0.5, 2))
            self.stack.start_worker(victim)
            if self.restart_pg_at is not None and time.monotonic() >= self.restart_pg_at:
                self.restart_pg_at = None
                self.restart_postgres()
        for name in ("worker1", "worker2"):  # both up for the drain
            proc = self.stack.procs.get(name)
            if proc is None or proc.poll() is not None:
                self.stack.start_worker(name)
        self.sandbox.call("DELETE", "/_sandbox/faults")
        self.sandbox.call("POST", "/_sandbox/webhooks", {"hold": False, "duplicate": 0})
        self.sandbox.call("POST", "/_sandbox/webhooks/release", {"order": "forward"})


# --- checks ----------------------------------------------------------------------------------------
INTERNAL_OWNERS = {"system", "payments", "orders"}


def django_setup(env: dict) -> None:
    for key in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "CELERY_BROKER_URL", "CELERY_TASK_DEFAULT_QUEUE",
                "PAYMENT_PROVIDER", "STRIPE_API_BASE", "STRIPE_API_KEY", "STRIPE_WEBHOOK_SECRET", "DJANGO_SECRET_KEY"):
        os.environ[key] = env[key]
    os.environ["OUTBOX_ENQUEUE_ON_COMMIT"] = "0"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def backlog() -> dict:
    from workflow import clock
    from workflow.models import OutboxItem, Timer

    now = clock.now()
    return {
        "outbox_due_or_retrying": OutboxItem.objects.filter(state__in=["pending", "retry_scheduled"]).count(),
        "timers_due": Timer.objects.filter(status="scheduled", scheduled_at__lte=now).count(),
        "webhooks_idle": True,
    }


def wait_for_drain(sandbox: Http, max_seconds: float) -> dict:
    from django.db import connection

    deadline = time.monotonic() + max_seconds
    while True:
        connection.close()
        state = backlog()
        status, ledger = sandbox.call("GET", "/_sandbox/ledger")
        webhooks = ledger.get("webhooks", {}) if status == 200 else {}
        state["webhooks_idle"] = bool(webhooks.get("idle")) and not webhooks.get("held")
        if (state["outbox_due_or_retrying"] == 0 and state["timers_due"] == 0 and state["webhooks_idle"]) \
                or time.monotonic() > deadline:
            return state
        time.sleep(2)


def classify_waiting() -> tuple[collections.Counter, collections.Counter]:
    """Each non-terminal record: why it waits (explained) or not (unexplained)."""
    from workflow.machine import machines
    from workflow.models import OutboxItem, Timer

    explained: collections.Counter = collections.Counter()
    unexplained: collections.Counter = collections.Counter()
    for model in machines():
        label = model.aggregate_label()
        if label.startswith("kernel_app.") or label == "workflow.outboxitem":
            continue
        for obj in model.objects.exclude(state__in=list(model.TERMINAL_STATES)):
            policy = model.WAIT_POLICIES.get(obj.state)
            timer = Timer.objects.filter(aggregate_type=label, aggregate_id=obj.pk, status="scheduled").exists()
            dead = OutboxItem.objects.filter(aggregate_type=label, aggregate_id=obj.pk, state="dead").exists()
            owner = getattr(policy, "owner", "system")
            if dead:
                reason = "owes a dead letter (error recorded; operator requeue)"
            elif obj.state == "manual_review" or owner not in INTERNAL_OWNERS:
                reason = f"waits for {owner}"
            elif timer:
                reason = f"waits for its timer ({policy.timer_event or 'scheduled'})"
            else:
                unexplained[f"{label}:{obj.state}"] += 1
                continue
            explained[f"{label}:{obj.state} — {reason}"] += 1
    return explained, unexplained


def provider_checks(ledger: dict) -> dict:
    intents = ledger["payment_intents"]
    per_attempt = collections.Counter(i["metadata"].get("ledgerflow_attempt") for i in intents)
    captures = collections.Counter(e["data"]["object"]["id"] for e in ledger["events"]
                                   if e["type"] == "payment_intent.succeeded")
    live_refunds = collections.Counter(r["payment_intent"] for r in ledger["refunds"]
                                       if r["status"] in ("pending", "succeeded"))
    received = {i["id"]: i["amount_received"] for i in intents}
    refunded: collections.Counter = collections.Counter()
    for r in ledger["refunds"]:
        if r["status"] in ("pending", "succeeded"):
            refunded[r["payment_intent"]] += r["amount"]
    return {
        "intents": len(intents),
        "captured_intents": sum(1 for i in intents if i["status"] == "succeeded"),
        "canceled_intents": sum(1 for i in intents if i["status"] == "canceled"),
        "refunds": len(ledger["refunds"]),
        "double_capture": sum(1 for n in captures.values() if n > 1),
        "double_refund": sum(1 for n in live_refunds.values() if n > 1),
        "over_refunded": sum(1 for i, amount in refunded.items() if amount > received.get(i, 0)),
        "intents_per_attempt_over_1": sum(1 for n in per_attempt.values() if n > 1),
    }


def local_checks() -> dict:
    from django.db.models import Count

    from orders.models import Order
    from orders.selectors import invariant_violations
    from payments.models import PaymentAttempt, Refund
    from printing.models import PrintJob, UsageRecord
    from workflow.models import OutboxAttempt, OutboxItem
    from workflow.selectors import all_history_mismatches

    twice = (OutboxAttempt.objects.filter(succeeded=True).values("item_id").annotate(n=Count("id"))
             .filter(n__gt=1).count())
    billed = UsageRecord.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1).count()
    return {
        "orders": dict(collections.Counter(Order.objects.values_list("state", flat=True))),
        "payment_attempts": dict(collections.Counter(PaymentAttempt.objects.values_list("state", flat=True))),
        "refunds": dict(collections.Counter(Refund.objects.values_list("state", flat=True))),
        "print_jobs": dict(collections.Counter(PrintJob.objects.values_list("state", flat=True))),
        "outbox": dict(collections.Counter(OutboxItem.objects.values_list("state", flat=True))),
        "outbox_lost": OutboxItem.objects.filter(state__in=["pending", "retry_scheduled"]).count(),
        "outbox_dead_without_error": OutboxItem.objects.filter(state="dead", last_error="").count(),
        "outbox_delivered_twice": twice,
        "outbox_attempts_failed": OutboxAttempt.objects.filter(succeeded=False).count(),
        "print_jobs_billed_twice": billed,
        "audit_violations": [f"{v.invariant} {v.aggregate_type}#{v.aggregate_id}: {v.detail}"
                             for v in invariant_violations()],
        "history_mismatches": [f"{m.aggregate_type}#{m.aggregate_id}: {m.problem}" for m in all_history_mismatches()],
        "dead_letters": list(OutboxItem.objects.filter(state="dead").values_list("effect_type", "last_error")[:20]),
    }


# --- main ------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=int(os.environ.get("CHAOS_SECONDS", "150")))
    parser.add_argument("--drain-seconds", type=int, default=240)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "0")) or None)
    parser.add_argument("--no-postgres-restart", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, prints, ledgers)")
    args = parser.parse_args()
    seed = args.seed or random.randrange(1, 10**6)
    rng = random.Random(seed)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="ledgerflow-chaos-"))
    stack = Stack(workdir, args.seconds)
    log(f"seed {seed}; work folder {workdir}; database {stack.db_name}; queue {stack.queue}")
    try:
        stack.create_database()
        web, api_key = stack.start_all()
        log(f"stack up at {web} (sandbox :{stack.sandbox_port}) after {time.monotonic() - started:.0f}s")
        until = time.monotonic() + args.seconds
        load = Load(Http(web, api_key), stack.station_id, until)
        load.setup()
        restart_at = None if args.no_postgres_restart else time.monotonic() + args.seconds * rng.uniform(0.3, 0.6)
        chaos = Chaos(stack, until, restart_at, rng)
        threads = [threading.Thread(target=load.run_thread, args=(seed + i,), daemon=True)
                   for i in range(args.threads)]
        threads.append(threading.Thread(target=chaos.run, daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log(f"load done: {sum(load.counts.values())} requests; draining")
        django_setup(stack.env)
        drained = wait_for_drain(chaos.sandbox, args.drain_seconds)
        # Let the station finish what it holds, then settle due timers one last time.
        time.sleep(3)
        drained = wait_for_drain(chaos.sandbox, 60)
        _, ledger = chaos.sandbox.call("GET", "/_sandbox/ledger")
        provider = provider_checks(ledger)
        local = local_checks()
        explained, unexplained = classify_waiting()
        prints = sum(1 for f in stack.prints.glob("ledgerflow-job-*") if not f.name.endswith(".meta"))
    finally:
        stack.stop_all()
    elapsed = time.monotonic() - started
    report = {
        "seed": seed, "elapsed_seconds": round(elapsed), "load_seconds": args.seconds,
        "requests": dict(sorted(load.counts.items())), "server_errors_5xx": len(load.errors),
        "chaos": dict(chaos.counts), "drain": drained, "provider": provider,
        **{k: v for k, v in local.items() if k != "dead_letters"},
        "files_printed": prints, "waiting_explained": dict(explained), "waiting_unexplained": dict(unexplained),
    }
    print(json.dumps(report, indent=2, default=str))
    if local["dead_letters"]:
        print("dead letters (effect type, error):")
        for effect_type, error in local["dead_letters"]:
            print(f"  {effect_type}: {error.splitlines()[0][:200]}")
    if load.retry_refusals:
        print("4xx answers to commands retried after a 5xx:")
        for line in load.retry_refusals[:10]:
            print("  " + line)
    if load.errors:
        print("5xx / errors seen by the load (first 10):")
        for line in load.errors[:10]:
            print("  " + line)
    problems = {
        "double capture": provider["double_capture"], "double refund": provider["double_refund"],
        "over-refunded": provider["over_refunded"], "intents per attempt > 1": provider["intents_per_attempt_over_1"],
        "outbox lost": local["outbox_lost"], "dead without error": local["outbox_dead_without_error"],
        "delivered twice": local["outbox_delivered_twice"], "billed twice": local["print_jobs_billed_twice"],
        "audit violations": len(local["audit_violations"]), "history mismatches": len(local["history_mismatches"]),
        "unexplained waiting": sum(unexplained.values()),
    }
    print("\nSUMMARY  " + "  ".join(f"{k}: {v}" for k, v in problems.items()))
    print(f"         orders {sum(local['orders'].values())}, print jobs {sum(local['print_jobs'].values())}, "
          f"worker kills {chaos.counts['worker_sigkill']}, postgres restarts {chaos.counts['postgres_restart']}, "
          f"5xx {len(load.errors)}, elapsed {elapsed:.0f}s")
    if args.keep:
        log(f"work folder kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

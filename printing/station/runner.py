"""The station's loop: recover, replay the ledger, then heartbeat / follow / report / claim, forever.

Order of writes for one job (the ledger is always written before the server hears anything):

1. content spooled to disk and fsynced; ledger row ``received`` + report ``received`` (one transaction)
2. ledger ``handing_off``; ``lp`` (or the folder write)
3. ledger ``handed_off`` with the OS job id + report ``printing``
4. following the OS job until it ends; ledger ``completed`` / ``failed`` (reason verbatim) + that report

A crash between any two steps is recovered from the ledger at the next start: step 1 without 2 prints
(the OS was never called); 2 without 3 asks the OS whether it has a job with our marker (and prints
only if it certainly has none); 3 without 4 follows the OS job to its end. A job already in the
ledger is never printed again when the server offers it again: the station re-reports what it knows.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import STATION_VERSION
from .client import ServerRefused, ServerUnavailable, StationClient
from .ledger import (
    COMPLETED,
    FAILED,
    FINAL_PHASES,
    HANDED_OFF,
    HANDING_OFF,
    INTERRUPTED,
    KIND_COMPLETED,
    KIND_FAILED,
    KIND_FOR_PHASE,
    KIND_INTERRUPTED,
    KIND_PRINTING,
    KIND_RECEIVED,
    RECEIVED,
    Ledger,
)
from .outputs import COMPLETED as OS_COMPLETED
from .outputs import FAILED as OS_FAILED
from .outputs import PENDING as OS_PENDING
from .outputs import AmbiguousSubmit, JobStatus, Output, OutputError

log = logging.getLogger("ledgerflow.station")

ACCEPTED_RESULTS = frozenset({"applied", "already_applied"})


class Unauthorized(Exception):
    pass


class _Stop(Exception):
    pass


class Station:
    def __init__(
        self,
        client: StationClient,
        ledger: Ledger,
        output: Output,
        *,
        spool_dir: Path,
        poll_wait: float = 20.0,
        heartbeat_every: float = 15.0,
        follow_seconds: float = 30.0,
        follow_interval: float = 0.5,
        max_print_delay: float = 600.0,
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.output = output
        self.spool_dir = spool_dir
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.poll_wait = poll_wait
        self.heartbeat_every = heartbeat_every
        self.follow_seconds = follow_seconds
        self.follow_interval = follow_interval
        self.max_print_delay = max_print_delay
        self._last_heartbeat = 0.0
        self._replayed = False
        self._stopping = False
        self._in_poll = False
        self.jobs_handled = 0

    # --- lifecycle ----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def handle(signum, frame):
            self._stopping = True
            if self._in_poll:
                raise _Stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(self, *, until_idle: bool = False, max_jobs: int | None = None) -> int:
        """Run until stopped (or, with ``until_idle``, until nothing is left to do). Returns an exit code."""
        self.recover()
        backoff = 1.0
        try:
            while not self._stopping:
                try:
                    idle = self.step()
                    backoff = 1.0
                except ServerUnavailable as exc:
                    log.warning("server unavailable (%s); retrying in %.0fs", exc, backoff)
                    self._sleep(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                except ServerRefused as exc:
                    # Not this station's fault to fix by retrying at once; keep running, slowly.
                    log.error("server refused a request (%s); retrying in %.0fs", exc, backoff)
                    self._sleep(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                if max_jobs is not None and self.jobs_handled >= max_jobs and self._nothing_owed():
                    return 0
                if until_idle and idle and self._nothing_owed():
                    return 0
        except Unauthorized as exc:
            log.error("the server refused this station's token: %s", exc)
            return 2
        except _Stop:
            pass
        return 0

    def step(self) -> bool:
        """One round. True when the claim came back empty (the station is idle)."""
        self.heartbeat_if_due()
        self.follow_open_jobs(budget=0)
        self.flush_reports()  # owed reports first, in the order they happened
        if not self._replayed:
            self.replay_ledger()
        for job in self.ledger.jobs(phases={RECEIVED}):
            self.print_if_confirmed(job.job_id)
        wait = self.poll_wait if not self._open_jobs() else min(self.poll_wait, 2.0)
        self._in_poll = True
        try:
            if self._stopping:
                raise _Stop()
            job = self._call(self.client.claim, wait)
        finally:
            self._in_poll = False
        if job is None:
            return True
        self.handle_offer(job)
        return False

    # --- server calls -------------------------------------------------------------------------
    @staticmethod
    def _call(fn, *args):
        try:
            return fn(*args)
        except ServerRefused as exc:
            if exc.status == 401:
                raise Unauthorized(str(exc)) from exc
            raise

    def heartbeat_if_due(self) -> None:
        if time.monotonic() - self._last_heartbeat < self.heartbeat_every:
            return
        info = {
            "station_version": STATION_VERSION,
            "output": self.output.describe(),
            "open_jobs": len(self._open_jobs()),
            "ledger_jobs": len(self.ledger.jobs()),
        }
        answer = self._call(self.client.heartbeat, info)
        self._last_heartbeat = time.monotonic()
        interval = answer.get("heartbeat_interval_seconds") if isinstance(answer, dict) else None
        if isinstance(interval, int | float) and interval > 0:
            self.heartbeat_every = float(interval)

    def replay_ledger(self) -> None:
        """Send every outcome this ledger holds; the server settles what it had to leave ``unknown``."""
        reports = self.ledger.final_reports()
        if reports:
            entries = [{"job_id": r.job_id, **r.body} for r in reports]
            results = self._call(self.client.replay_ledger, entries)
            for result in results:
                event_id = result.get("event_id")
                if event_id:
                    self.ledger.ack(
                        event_id, result=result.get("result", ""), server_state=result.get("state", "")
                    )
                log.info(
                    "ledger replay job %s: %s (%s)",
                    result.get("job_id"),
                    result.get("result"),
                    result.get("state", result.get("error", "")),
                )
        self._replayed = True

    def flush_reports(self) -> None:
        for report in self.ledger.unacked_reports():
            try:
                answer = self._call(self.client.report, report.job_id, report.body)
            except ServerRefused as exc:
                # The server judged it and will judge it the same way again: stop retrying it.
                self.ledger.ack(report.event_id, result=f"refused:{exc.status}:{exc.code}")
                log.warning("report %s for job %s refused: %s", report.kind, report.job_id, exc)
                continue
            self.ledger.ack(
                report.event_id, result=answer.get("result", ""), server_state=answer.get("state", "")
            )
            log.info(
                "reported %s for job %s: %s -> %s",
                report.kind,
                report.job_id,
                answer.get("result"),
                answer.get("state"),
            )

    def _flush_quietly(self) -> None:
        """Reporting right away is a courtesy; if the server is away the ledger keeps the report."""
        try:
            self.flush_reports()
        except ServerUnavailable as exc:
            log.warning("could not report yet (%s); the ledger keeps it", exc)

    # --- jobs ---------------------------------------------------------------------------------
    def handle_offer(self, job: dict[str, Any]) -> None:
        job_id = str(job["id"])
        lease = str(job["lease_token"])
        known = self.ledger.get(job_id)
        if known is None:
            self._receive(job_id, lease, job)
            return
        # Offered again (an earlier lease ran out before the server heard from us): never print twice.
        known = self.ledger.record_reoffer(job_id, lease)
        log.warning(
            "job %s offered again (offer %d, ledger phase %s): not printing it again",
            job_id,
            known.offers,
            known.phase,
        )
        if known.phase in FINAL_PHASES:
            extra: dict[str, Any] = {}
            if known.phase != COMPLETED:
                extra["reason"] = known.reason
            if known.os_job_id:
                extra["os_job_id"] = known.os_job_id
            self.ledger.queue_report(job_id, KIND_FOR_PHASE[known.phase], **extra)
            self._flush_quietly()
            return
        self.ledger.queue_report(job_id, KIND_RECEIVED)
        if known.phase == HANDED_OFF:
            self.ledger.queue_report(job_id, KIND_PRINTING, os_job_id=known.os_job_id)
        self._flush_quietly()
        if known.phase == RECEIVED:
            self.print_if_confirmed(job_id)
        elif known.phase == HANDING_OFF:
            self._resolve_handing_off(known.job_id)
        elif known.phase == HANDED_OFF:
            self.follow(job_id, budget=self.follow_seconds)

    def _receive(self, job_id: str, lease: str, job: dict[str, Any]) -> None:
        content_type = str(job.get("content_type", ""))
        problem = ""
        spool = self.spool_dir / f"job-{job_id}"
        try:
            data = base64.b64decode(job.get("content_base64") or "", validate=True)
            expected = job.get("content_sha256")
            if expected and hashlib.sha256(data).hexdigest() != expected:
                problem = "station received content that does not match its sha256; not printed"
        except ValueError as exc:
            data, problem = b"", f"station could not decode the content: {exc}; not printed"
        if not problem:
            tmp = spool.with_suffix(".partial")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, spool)
        self.ledger.record_received(
            job_id=job_id,
            title=str(job.get("title", "")),
            content_type=content_type,
            copies=int(job.get("copies") or 1),
            content_sha256=str(job.get("content_sha256", "")),
            spool_path=str(spool) if not problem else "",
            lease_token=lease,
        )
        log.info("job %s received (%s, %d bytes)", job_id, content_type, len(data))
        self._flush_quietly()
        if problem:
            self._finish(job_id, JobStatus(OS_FAILED, problem))
            return
        self.print_if_confirmed(job_id)

    def print_if_confirmed(self, job_id: str) -> None:
        """Print a received job once the server has accepted our ``received`` under the current lease.

        The lease is the fencing token: a receipt the server answered ``stale`` (our lease ran out) is not
        permission to print; the job waits for the server to offer it again. A receipt older than
        ``max_print_delay`` is not printed at all (a station that was off for hours must not print
        yesterday's labels); it is reported failed with that reason.
        """
        job = self.ledger.get(job_id)
        if job is None or job.phase != RECEIVED:
            return
        receipts = [
            r
            for r in self.ledger.reports_for(job_id)
            if r.kind == KIND_RECEIVED and r.body.get("lease_token") == job.lease_token
        ]
        if not receipts or not any(r.result in ACCEPTED_RESULTS for r in receipts):
            return
        age = (datetime.now(UTC) - datetime.fromisoformat(job.received_at)).total_seconds()
        if age > self.max_print_delay:
            self._finish(
                job_id,
                JobStatus(
                    OS_FAILED,
                    f"not printed: the station received it {int(age)}s ago and "
                    f"prints nothing later than {int(self.max_print_delay)}s",
                ),
            )
            return
        self.print_job(job_id)

    def print_job(self, job_id: str) -> None:
        job = self.ledger.get(job_id)
        spool = Path(job.spool_path) if job.spool_path else None
        if spool is None or not spool.exists():
            # The OS was never called for it (phase received), so this is a plain failure, not a doubt.
            self._finish(
                job_id, JobStatus(OS_FAILED, "station lost the spooled content before printing; not printed")
            )
            return
        self.ledger.set_phase(job_id, HANDING_OFF)
        try:
            os_job_id = self.output.submit(
                job_id=job_id,
                spool_path=spool,
                title=job.title,
                copies=job.copies,
                content_type=job.content_type,
                nonce=job.nonce,
            )
        except AmbiguousSubmit as exc:
            self._finish(job_id, JobStatus("unknown", f"handing the job to the OS was interrupted: {exc}"))
            return
        except OutputError as exc:
            self._finish(job_id, JobStatus(OS_FAILED, str(exc)))
            return
        self.jobs_handled += 1
        self.ledger.set_phase(
            job_id,
            HANDED_OFF,
            os_job_id=os_job_id,
            report=KIND_PRINTING,
            report_extra={"os_job_id": os_job_id},
        )
        log.info("job %s handed to the OS as %s", job_id, os_job_id)
        self._flush_quietly()
        self.follow(job_id, budget=self.follow_seconds)

    def follow(self, job_id: str, *, budget: float) -> None:
        """Watch the OS job until it ends or ``budget`` seconds pass (then the main loop keeps watching)."""
        deadline = time.monotonic() + budget
        while True:
            job = self.ledger.get(job_id)
            status = self.output.status(job.os_job_id)
            if status.status != OS_PENDING:
                self._finish(job_id, status)
                return
            if time.monotonic() >= deadline or self._stopping:
                return
            self._sleep(self.follow_interval)

    def follow_open_jobs(self, *, budget: float) -> None:
        for job in self.ledger.jobs(phases={HANDED_OFF}):
            self.follow(job.job_id, budget=budget)

    def _finish(self, job_id: str, status: JobStatus, *, report_now: bool = True) -> None:
        job = self.ledger.get(job_id)
        extra: dict[str, Any] = {"os_job_id": job.os_job_id} if job.os_job_id else {}
        if status.status == OS_COMPLETED:
            self.ledger.set_phase(job_id, COMPLETED, report=KIND_COMPLETED, report_extra=extra)
        elif status.status == OS_FAILED:
            self.ledger.set_phase(
                job_id,
                FAILED,
                reason=status.reason,
                report=KIND_FAILED,
                report_extra={**extra, "reason": status.reason},
            )
        else:
            self.ledger.set_phase(
                job_id,
                INTERRUPTED,
                reason=status.reason,
                report=KIND_INTERRUPTED,
                report_extra={**extra, "reason": status.reason},
            )
        log.info(
            "job %s finished on this station: %s %s", job_id, self.ledger.get(job_id).phase, status.reason
        )
        if job.spool_path:
            Path(job.spool_path).unlink(missing_ok=True)
        if report_now:
            self._flush_quietly()

    # --- recovery after a restart ---------------------------------------------------------------
    def recover(self) -> None:
        """Bring every unfinished ledger job to a safe phase before talking to the server.

        Only what the OS knows is settled here; jobs still ``received`` are printed by ``step`` once the
        server has confirmed the lease they were received under (never blindly after a restart).
        """
        for job in self.ledger.jobs(phases={HANDING_OFF}):
            self._resolve_handing_off(job.job_id, print_now=False)
        for job in self.ledger.jobs(phases={HANDED_OFF}):
            status = self.output.status(job.os_job_id)
            if status.status != OS_PENDING:
                self._finish(job.job_id, status, report_now=False)

    def _resolve_handing_off(self, job_id: str, *, print_now: bool = True) -> None:
        """A stop while calling the OS: adopt the OS job if it exists; print only if it certainly does not."""
        try:
            os_job_id = self.output.find(job_id, self.ledger.get(job_id).nonce)
        except OutputError as exc:
            reason = (
                f"station stopped while handing the job to the OS and cannot tell whether it got it: {exc}"
            )
            self._finish(job_id, JobStatus("unknown", reason), report_now=print_now)
            return
        if os_job_id:
            self.ledger.set_phase(
                job_id,
                HANDED_OFF,
                os_job_id=os_job_id,
                report=KIND_PRINTING,
                report_extra={"os_job_id": os_job_id},
            )
            log.info(
                "job %s: the OS already had it as %s; following it instead of printing again",
                job_id,
                os_job_id,
            )
            return
        self.ledger.set_phase(job_id, RECEIVED)
        if print_now:
            self.print_if_confirmed(job_id)

    # --- helpers ------------------------------------------------------------------------------
    def _open_jobs(self) -> list:
        """Jobs this station is working on. A ``received`` job whose receipt the server refused waits
        (dormant) for the server to offer it again; it is not work in progress."""
        return self.ledger.jobs(phases={HANDING_OFF, HANDED_OFF})

    def _nothing_owed(self) -> bool:
        return not self._open_jobs() and not self.ledger.unacked_reports()

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

"""Where a station prints: the real OS print path (CUPS ``lp``) or, for development, a folder.

An output does three things: ``submit`` hands a spooled file to the OS and answers the OS's job id
(raising ``OutputError`` with the OS's words when it refuses); ``status`` says whether that OS job is
still ``pending`` or has ended ``completed`` / ``failed`` (with a reason) — or ``unknown`` when the OS
no longer knows it; ``find`` looks for a job the station may have submitted just before a crash.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

from . import ipp

PENDING = "pending"
COMPLETED = "completed"
FAILED = "failed"
UNKNOWN = "unknown"

EXTENSIONS = {"pdf": "pdf", "raw-zpl": "zpl", "text": "txt"}
LP_TIMEOUT_SECONDS = 60


class OutputError(Exception):
    """The OS print path refused the job; ``str(exc)`` is its reason, verbatim where we have it."""


@dataclasses.dataclass
class JobStatus:
    status: str
    reason: str = ""


def job_marker(job_id: str, nonce: str = "") -> str:
    """The name every OS job of ours carries, so a crashed station can find what it handed off.

    ``nonce`` is drawn by this station when it first receives the job, so an OS job left over from
    another ledger (a reinstalled station, a reset server) can never be mistaken for this one.
    """
    return f"ledgerflow-job-{job_id}" + (f"-{nonce}" if nonce else "")


def make_output(spec: str, *, lp_options: list[str] | None = None) -> Output:
    kind, _, target = spec.partition(":")
    if kind == "dir" and target:
        return DirOutput(Path(target))
    if kind == "cups" and target:
        return CupsOutput(target, lp_options=lp_options or [])
    raise ValueError(f"--output must be cups:QUEUE or dir:PATH, not {spec!r}")


class Output:
    name = "output"

    def describe(self) -> str:
        raise NotImplementedError

    def submit(
        self, *, job_id: str, spool_path: Path, title: str, copies: int, content_type: str, nonce: str = ""
    ) -> str:
        raise NotImplementedError

    def status(self, os_job_id: str) -> JobStatus:
        raise NotImplementedError

    def find(self, job_id: str, nonce: str = "") -> str | None:
        """The OS job id of a job we may have submitted, or None when the OS certainly never got it.

        Raises ``OutputError`` when the OS cannot be asked (the caller must then assume the worst).
        """
        raise NotImplementedError


class DirOutput(Output):
    """Development printer: each job becomes a file in a folder (written atomically: the rename prints)."""

    name = "dir"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"dir:{self.folder}"

    def _final_path(self, job_id: str, content_type: str) -> Path:
        return self.folder / f"{job_marker(job_id)}.{EXTENSIONS.get(content_type, 'bin')}"

    def submit(
        self, *, job_id: str, spool_path: Path, title: str, copies: int, content_type: str, nonce: str = ""
    ) -> str:
        final = self._final_path(job_id, content_type)
        tmp = final.with_name(final.name + ".partial")
        try:
            data = spool_path.read_bytes()
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            # The sidecar says what a real printer would have been told.
            final.with_suffix(".meta").write_text(
                f"title: {title}\ncopies: {copies}\ncontent_type: {content_type}\n"
            )
            os.replace(tmp, final)
        except OSError as exc:
            raise OutputError(f"cannot write {final}: {exc}") from exc
        return final.name

    def status(self, os_job_id: str) -> JobStatus:
        if (self.folder / os_job_id).exists():
            return JobStatus(COMPLETED)
        return JobStatus(UNKNOWN, f"{os_job_id} is no longer in {self.folder}")

    def find(self, job_id: str, nonce: str = "") -> str | None:
        for path in self.folder.glob(f"{job_marker(job_id)}.*"):
            if path.suffix not in (".partial", ".meta"):
                return path.name
        return None


REQUEST_ID = re.compile(r"request id is (\S+)")


class CupsOutput(Output):
    """The real OS print path: ``lp -d QUEUE``; followed with ``lpstat`` and the scheduler's job state."""

    name = "cups"

    def __init__(self, queue: str, *, lp_options: list[str]) -> None:
        self.queue = queue
        self.lp_options = lp_options

    def describe(self) -> str:
        return f"cups:{self.queue}"

    def submit(
        self, *, job_id: str, spool_path: Path, title: str, copies: int, content_type: str, nonce: str = ""
    ) -> str:
        cmd = [
            "lp",
            "-d",
            self.queue,
            "-n",
            str(max(1, copies)),
            "-t",
            f"{job_marker(job_id, nonce)} {title}".strip(),
        ]
        for option in self.lp_options:
            cmd += ["-o", option]
        cmd.append(str(spool_path))
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=LP_TIMEOUT_SECONDS, check=False
            )
        except FileNotFoundError as exc:
            raise OutputError(f"lp is not installed: {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            # lp may or may not have queued it: the caller treats this as ambiguous, not as a failure.
            raise AmbiguousSubmit(f"lp did not answer within {LP_TIMEOUT_SECONDS}s") from exc
        if done.returncode != 0:
            raise OutputError(
                (done.stderr or done.stdout).strip() or f"lp exited with status {done.returncode}"
            )
        match = REQUEST_ID.search(done.stdout)
        if not match:
            raise AmbiguousSubmit(f"lp succeeded but printed no request id: {done.stdout.strip()!r}")
        return match.group(1)

    def _cups_number(self, os_job_id: str) -> int | None:
        tail = os_job_id.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else None

    def _still_queued(self, os_job_id: str) -> bool:
        done = subprocess.run(
            ["lpstat", "-W", "not-completed", "-o", self.queue],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0 and done.stderr.strip():
            raise OutputError(f"lpstat failed: {done.stderr.strip()}")
        return any(line.split()[:1] == [os_job_id] for line in done.stdout.splitlines())

    def status(self, os_job_id: str) -> JobStatus:
        try:
            if self._still_queued(os_job_id):
                return JobStatus(PENDING)
        except (OSError, subprocess.SubprocessError, OutputError) as exc:
            return JobStatus(PENDING, f"cannot ask lpstat yet: {exc}")
        number = self._cups_number(os_job_id)
        if number is None:
            return JobStatus(UNKNOWN, f"not a CUPS job id: {os_job_id}")
        try:
            attrs = ipp.job_attributes(number)
        except ipp.IppError as exc:
            return self._status_from_history(os_job_id, exc)
        return self._judge(os_job_id, attrs)

    @staticmethod
    def _judge(os_job_id: str, attrs: dict) -> JobStatus:
        state = attrs.get("job-state")
        message = attrs.get("job-state-message") or ""
        reasons = ", ".join(r for r in attrs.get("job-state-reasons", []) if r and r != "none")
        if state == "completed":
            return JobStatus(COMPLETED)
        if state in ("canceled", "aborted"):
            detail = "; ".join(p for p in (message, reasons) if p)
            return JobStatus(FAILED, f"CUPS job {os_job_id} {state}" + (f": {detail}" if detail else ""))
        return JobStatus(PENDING)

    def _status_from_history(self, os_job_id: str, cause: Exception) -> JobStatus:
        """Without IPP, lpstat still lists finished jobs; it cannot say *how* they ended."""
        done = subprocess.run(
            ["lpstat", "-W", "completed", "-o", self.queue],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if any(line.split()[:1] == [os_job_id] for line in done.stdout.splitlines()):
            return JobStatus(
                UNKNOWN, f"CUPS job {os_job_id} left the queue but its end state is unreadable: {cause}"
            )
        return JobStatus(UNKNOWN, f"CUPS no longer knows job {os_job_id}: {cause}")

    def find(self, job_id: str, nonce: str = "") -> str | None:
        marker = job_marker(job_id, nonce)
        try:
            jobs = ipp.find_jobs(self.queue)
        except ipp.IppError as exc:
            raise OutputError(str(exc)) from exc
        ours = [
            job
            for job in jobs
            if str(job.get("job-name", "")) == marker or str(job.get("job-name", "")).startswith(marker + " ")
        ]
        if not ours:
            return None
        newest = max(ours, key=lambda job: int(job.get("job-id", 0)))
        return f"{self.queue}-{newest['job-id']}"


class AmbiguousSubmit(OutputError):
    """The OS may or may not have the job: never resubmit, mark it interrupted."""

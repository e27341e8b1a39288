"""Kernel optimisations proposed by the bench, measured in the same run without editing workflow/kernel.py.

``kernel.diff`` is the exact proposed change to workflow/kernel.py. ``proposed_kernel()`` applies it to a
temporary copy, imports that copy and routes ``workflow.kernel.apply`` to it for the duration of the
block (every caller reaches ``apply`` through the module attribute), then restores the original.
If the diff no longer applies to the current kernel, the block yields False and the rows are skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DIFF = HERE / "kernel.diff"


def build_proposed_kernel():
    """The patched kernel as a module, or None when the diff does not apply (or `patch` is missing)."""
    if shutil.which("patch") is None:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="bench-kernel-"))
    target = tmp / "proposed_kernel.py"
    done = subprocess.run(
        [
            "patch",
            "--silent",
            "--forward",
            "-o",
            str(target),
            str(ROOT / "workflow" / "kernel.py"),
            str(DIFF),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None
    source = target.read_text()
    source = re.sub(r"^from \. import ", "from workflow import ", source, flags=re.M)
    source = re.sub(r"^(\s*)from \.(\w+) import ", r"\1from workflow.\2 import ", source, flags=re.M)
    target.write_text(source)
    spec = importlib.util.spec_from_file_location("bench_proposed_kernel", target)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_proposed_kernel"] = module
    spec.loader.exec_module(module)
    return module


_built: list = []


@contextlib.contextmanager
def proposed_kernel():
    from workflow import kernel

    if not _built:
        _built.append(build_proposed_kernel())
    module = _built[0]
    if module is None:
        yield False
        return
    original = kernel.apply
    kernel.apply = module.apply
    try:
        yield True
    finally:
        kernel.apply = original


@contextlib.contextmanager
def enqueue_on_commit(enabled: bool):
    """Toggle the after-commit broker push (read by workflow.outbox at every commit)."""
    from django.conf import settings

    before = settings.OUTBOX_ENQUEUE_ON_COMMIT
    settings.OUTBOX_ENQUEUE_ON_COMMIT = enabled
    try:
        yield
    finally:
        settings.OUTBOX_ENQUEUE_ON_COMMIT = before

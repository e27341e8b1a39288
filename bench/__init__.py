"""`make bench`: the kernel, the webhook path, the outbox and the console queries against the
database's own floor, measured as ratios within one run. See docs/performance.md."""

"""Built-in effect handlers."""

from .outbox import effect_handler


@effect_handler("workflow.noop", max_attempts=3)
def noop(item):
    """Does nothing: used to exercise and measure the delivery machinery itself."""
    return None

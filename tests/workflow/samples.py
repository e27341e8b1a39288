from tests.kernel_app.models import Parcel
from tests.machines import MachineSamples, register
from workflow import kernel
from workflow.models import OutboxItem


def build_parcel(state: str) -> Parcel:
    return kernel.create(Parcel, actor="test", state=state, address="1 Test Street", weight_grams=500,
                         booking="bk-1")


register(MachineSamples(
    model=Parcel,
    build=build_parcel,
    payloads={
        "pack": lambda p: {"weight_grams": 500},
        "ship": lambda p: {"weight_grams": p.weight_grams, "booking": "bk-2"},
        "rebook": lambda p: {"booking": "bk-3"},
        "deliver": lambda p: {"booking": p.booking},
        "resolve": lambda p: {"decision": "ship"},
    },
))


def build_outbox_item(state: str) -> OutboxItem:
    import uuid

    return kernel.create(OutboxItem, actor="test", state=state, effect_type="workflow.noop",
                         effect_key=f"test:{uuid.uuid4()}", attempts=1)


register(MachineSamples(
    model=OutboxItem,
    build=build_outbox_item,
    payloads={
        "delivered": lambda i: {"attempt": i.attempts + 1},
        "attempt_failed": lambda i: {"attempt": i.attempts + 1, "error": "boom",
                                     "next_attempt_at": "2030-01-01T00:00:00+00:00"},
        "retries_exhausted": lambda i: {"attempt": i.attempts + 1, "error": "boom"},
    },
))

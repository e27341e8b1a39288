"""Which aggregate each op touches: a shared pool of (id, current state), so no two cases (or threads)
ever assume a state another case already moved on."""

from __future__ import annotations

import random
import threading
from collections import deque

from .subject import SUBJECT, Subject


class AggregatePool:
    def __init__(self, ids, subject: Subject = SUBJECT, seed: int = 7) -> None:
        self.subject = subject
        items = [(i, subject.state_of(i)) for i in ids if subject.state_of(i) in subject.forward]
        random.Random(seed).shuffle(items)
        self._items = deque(items)
        self._lock = threading.Lock()
        self.all_ids = list(ids)

    def take(self) -> tuple[int, str]:
        with self._lock:
            if not self._items:
                raise RuntimeError("aggregate pool exhausted: generate more aggregates or shorten the case")
            return self._items.popleft()

    def give_back(self, order_id: int, state: str) -> None:
        if state in self.subject.forward:
            with self._lock:
                self._items.append((order_id, state))

    def __len__(self) -> int:
        return len(self._items)

    def replay_target(self, rng: random.Random) -> tuple[int, str, str]:
        """A seeded, already-applied event: (id, event type, identity)."""
        order_id = rng.choice(self.all_ids)
        return order_id, self.subject.entered_by[self.subject.state_of(order_id)], f"seed:{order_id}"

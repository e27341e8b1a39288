"""`make run`'s embedded broker: kombu's filesystem transport, with message files that appear whole.

kombu's filesystem transport creates a message file under its final name and writes it afterwards; a
worker polling the folder can move and read the file in between, get an empty body and stop with
"Unrecoverable error: JSONDecodeError" (seen in `make run`, where beat and the web write every few
seconds). Here a message is written under a name no reader picks up and then renamed into place
(atomic within one folder), so a reader sees a whole message or none; exchange tables are created the
same way. Selected in config/settings.py when ``CELERY_BROKER_URL`` is ``filesystem://``; production
brokers (Redis) are unaffected.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: the same file name and body as kombu's, written atomically."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # Readers take files named "<anything>.<queue>.msg" (the part after the first dot); this is not one.
        partial = os.path.join(self.data_folder_out, f".partial-{name}")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


    def _queue_bind(self, exchange, routing_key, pattern, queue):
        """kombu creates an exchange table by opening it empty and then writing it: a process reading it
        in between fails the same way. Create it whole (an empty table, linked into place only if absent),
        then let kombu add the binding under its file lock."""
        table = self._exchange_file(exchange)
        if not table.exists():
            table.parent.mkdir(parents=True, exist_ok=True)
            partial = table.with_name(f".partial-{uuid.uuid4()}-{table.name}")
            partial.write_bytes(str_to_bytes(dumps([])))
            try:
                os.link(partial, table)  # atomic, and never replaces a table another process wrote meanwhile
            except FileExistsError:
                pass
            finally:
                partial.unlink()
        super()._queue_bind(exchange, routing_key, pattern, queue)


class Transport(filesystem.Transport):
    Channel = Channel

"""The Ledgerflow print station: a small program beside a printer that pulls print jobs.

It needs no Django (stdlib only) and no inbound networking: it long-polls the server for jobs
(``/api/v1/station/claim``), keeps a SQLite ledger of every job it received and what became of it
(written before anything is reported), prints through CUPS (``lp``, followed with ``lpstat``) or
into a folder, and reports ``received`` / ``printing`` / ``completed`` / ``failed``. After a restart
it replays its ledger (``/api/v1/station/ledger``) so a late acknowledgement can settle a job the
server had to mark ``unknown``. A job that is in the ledger is never printed again, even when the
server offers it again.

Run: ``python -m printing.station --api URL --token TOKEN --ledger PATH --output cups:QUEUE|dir:PATH``
"""

STATION_VERSION = "1.0"

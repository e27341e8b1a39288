from tests.sandbox_provider import sandbox, sandbox_process  # noqa: F401

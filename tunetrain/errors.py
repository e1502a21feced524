"""The one error type for bad input: it states the rule, the offending value and the fix."""

from __future__ import annotations


class ExperimentError(ValueError):
    """Bad input (experiment file, flags, cluster fit). The CLI prints it and exits 2.

    The message states the rule and the offending value; ``fix`` says what to do.
    """

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(message if fix is None else f"{message}\n  Fix: {fix}")


class InterruptedBeforeStart(KeyboardInterrupt):
    """Ctrl+C (or SIGTERM, SIGHUP) while a new sweep's Ray started, before it recorded
    anything: there is nothing to resume, and the CLI says so (exit 130)."""

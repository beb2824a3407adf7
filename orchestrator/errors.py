"""The one error hierarchy of bench.

Every error a user can cause or meet is a `BenchError`; `cli.main` catches it once,
prints its message on one line and exits with its `exit_code` (DESIGN.md, "Errors").
"""

from __future__ import annotations

import re


class BenchError(Exception):
    """Base of every error bench reports to a user: what happened, why, what to do."""

    exit_code = 1


class UsageError(BenchError):
    """Bad flags, bad configuration, bad names: nothing was sent or written."""

    exit_code = 2


class ConfigError(UsageError):
    """A setting in bench.toml, the environment or a flag is invalid."""


class RegistryLockedError(BenchError):
    """Another bench process held the run registry's lock for longer than we wait. Exit 2,
    as for configuration: the command read and wrote nothing, and the fix is the user's
    (let the other bench finish, or give this one its own BENCH_STATE_DIR); it is no bug
    (1), no cloud answer (4) and no result (5)."""

    exit_code = 2


class RefusedError(BenchError):
    """The launch would cost more than the budget or the monthly cap allows."""

    exit_code = 3


class CloudError(BenchError):
    """The cloud said no: capacity, quota or permission."""

    exit_code = 4


class NoCapacityError(CloudError):
    """No zone had the machine (stockouts everywhere we were allowed to try)."""


class QuotaError(CloudError):
    """A quota blocks the launch (regional GPUs, GPUS_ALL_REGIONS, CPUs)."""


class PermissionDeniedError(CloudError):
    """The credentials may not do what was asked."""


class ResultsError(BenchError):
    """Results are missing, incomplete or fail validation."""

    exit_code = 5


class NotFoundError(ResultsError):
    """A run, object or file that should exist does not."""


def network_reason(error: BaseException) -> str:
    """The useful part of a transport error ("[Errno 111] Connection refused"), in short."""
    text = str(error)
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if errno:
        return errno.group(0).strip()
    return f"{type(error).__name__}: {text[:160]}" if text else type(error).__name__

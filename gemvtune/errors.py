"""Exceptions that carry one clear line for the user."""

from __future__ import annotations


class GemvtuneError(Exception):
    """Base of every error gemvtune reports to a user (one line, no traceback)."""

    exit_code = 1


class UsageError(GemvtuneError, ValueError):
    """Bad input from the user: a malformed shape, an unknown parameter, a bad file (exit 2)."""

    exit_code = 2


class NoDeviceError(GemvtuneError):
    """A GPU command ran where no CUDA device answers."""

    exit_code = 3

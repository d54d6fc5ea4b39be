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


class OutputError(GemvtuneError):
    """An output could not be written for a reason that is not the user's input (a full disk, a quota, an I/O
    error): one line, exit 1; the previous file, if any, is unchanged."""

    exit_code = 1

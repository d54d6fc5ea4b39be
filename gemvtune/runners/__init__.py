"""Runners measure configs on shapes: ``cuda`` (a real GPU; the only place cupy is imported)."""

from .base import Measurement, Runner, Status

__all__ = ["Measurement", "Runner", "Status"]

"""The exceptions pipescope raises.

Every error carries the one-line message that ``ppsim`` prints after ``ppsim: error:``, naming the
option, file, rank, step or instruction at fault. Bad input raises a subclass that is also a
``ValueError``; a failure while running raises :class:`Error` itself.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of pipescope's errors (``ppsim`` exits 1 on one that is only this)."""


class UsageError(Error, ValueError):
    """An option or argument that cannot be honoured (``ppsim`` exits 2)."""


class ScheduleError(Error, ValueError):
    """A schedule that cannot be built, read or validated; the message names rank, step and instruction."""


class TraceError(Error, ValueError):
    """A trace file that cannot be read; the message names the file and the place."""


__all__ = ["Error", "UsageError", "ScheduleError", "TraceError"]

"""The one error type the bundle reader raises.

It subclasses :class:`bakery.errors.UsageError` because a bad bundle is bad *input*
(exit code 2), never a crash: engine import scripts and ``bakery verify`` catch this
single class and print its one-line message, which always names the offending file.
"""

from __future__ import annotations

from bakery.errors import UsageError


class BundleError(UsageError):
    """A bundle (or one file in it) is missing, truncated, corrupted or of an unknown version."""

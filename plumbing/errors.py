"""Errors that reach the user as one clear line instead of a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave us (a file, a flag, a field).

    The message names the field and the problem, e.g. ``phases[1].after: unknown phase 'reduce'``.
    The CLI prints ``sluice: error: <message>`` and exits with status 2.
    """

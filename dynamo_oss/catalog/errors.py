"""The one kind of error the `dynamo` command reports without a traceback.

A `UserError` is something the person at the terminal can fix: a graph that cannot run,
a missing binary, a port in use, a bad flag. The command prints its message and exits 2;
anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem in what the user asked for, explained in the message."""

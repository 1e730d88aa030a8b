"""The one base of every error a user can cause and fix.

The CLI prints a `UserError`, and an OS error a user can act on (`os_error_message`), as one line (it names the bad value and the valid choices or the way
out) and exits with status 2; any other exception is a bug and keeps its traceback. Each domain
error (CacheError, ConfigError, QueryError, ...) subclasses `UserError`; the three generic ones
below cover a bad argument, a missing input and an output in the way. They keep the matching
built-in as a second base, so `except ValueError` / `except FileNotFoundError` still catch them.
"""

import errno


class UserError(Exception):
    """A mistake in the user's input or files, reported without a traceback."""


class BadValueError(UserError, ValueError):
    """An argument outside its valid range or choices; the message names both."""


class MissingInputError(UserError, FileNotFoundError):
    """An input file or folder that is not there (or is not what the command reads)."""


class OutputExistsError(UserError, FileExistsError):
    """An output path already holds something the command will not replace without being asked."""


def os_error_message(e: OSError) -> str | None:
    """The one line for an OS error a user can fix (a full disk, a named file they gave), or None for one
    that is a bug. Writes are atomic and long jobs checkpoint, so after a full disk nothing half-written
    passes as finished and the rerun picks up where the job stopped."""
    where = f"{e.filename} -> {e.filename2}" if e.filename2 else e.filename
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"no space left on the device{f' writing {where}' if where else ''}: free some space and rerun the "
            "command (--resume where it has one); nothing half-written was kept"
        )
    if where is None:  # nothing to name: not a user's file, so keep the traceback
        return None
    return f"{e.strerror or type(e).__name__}: {where}"

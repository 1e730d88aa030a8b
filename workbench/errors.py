"""The one base of every error a user can cause and fix.

The CLI prints a `UserError` as one line (it names the bad value and the valid choices or the way
out) and exits with status 2; any other exception is a bug and keeps its traceback. Each domain
error (CacheError, ConfigError, QueryError, ...) subclasses `UserError`; the three generic ones
below cover a bad argument, a missing input and an output in the way. They keep the matching
built-in as a second base, so `except ValueError` / `except FileNotFoundError` still catch them.
"""


class UserError(Exception):
    """A mistake in the user's input or files, reported without a traceback."""


class BadValueError(UserError, ValueError):
    """An argument outside its valid range or choices; the message names both."""


class MissingInputError(UserError, FileNotFoundError):
    """An input file or folder that is not there (or is not what the command reads)."""


class OutputExistsError(UserError, FileExistsError):
    """An output path already holds something the command will not replace without being asked."""

"""The one base of every error a user can cause and fix.

The CLI prints a `UserError` as one line (it names the bad value and the valid choices or the way
out) and exits with status 2; any other exception is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's input or files, reported without a traceback."""

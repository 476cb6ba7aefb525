"""The one exception type for problems a user can fix.

Library code raises `UserError` with one sentence naming the file or value and what to do;
entry points (the root-level scripts) print that sentence and exit with status 2, instead of
a stack trace from deep inside TensorFlow.
"""


class UserError(Exception):
    """A problem the user can fix (bad path, bad input, bad value): printed as one sentence."""

"""Errors bert/ raises for problems a user can fix (a bad path, a config, vocab or checkpoint that
does not fit): `common.errors.UserError`s, so entry points print their one sentence and exit 2,
which are also the builtin types callers of bert/ have always caught."""

from common.errors import UserError


class BertError(UserError, ValueError):
    """A config, vocab or checkpoint that cannot serve the model; the message names the file."""


class BertFileNotFoundError(UserError, FileNotFoundError):
    """A config, vocab or checkpoint path that does not exist."""

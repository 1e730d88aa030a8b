"""The one base of every error a user can cause and fix, and the few classes below it.

The CLI prints a `UserError`, and an OS error a user can act on (`os_error_message`), as one line (it names
the bad value and the valid choices or the way out) and exits with status 2; any other exception is a bug
and keeps its traceback. A class exists only where code catches it by name or where it is a distinct message
family; each generic one keeps the matching built-in as a second base, so `except ValueError` /
`except FileNotFoundError` still catch it. The whole set is 15 classes; defined here, by message family:
- `UserError`: the base; also raised directly for a mistake that fits none of the families below.
- `BadValueError` (ValueError): an argument, split, hook name, corpus, task or path outside its valid range
  or choices; the message names both.
- `ConfigError` (ValueError): a config field (SAE, training, toy model, sparse attention) that is invalid.
- `MissingInputError` (FileNotFoundError): an input (a cache, an unfinished harvest, a file) that is not there.
- `OutputExistsError` (FileExistsError): an output in the way that is not replaced without being asked.
- `DamagedFileError` (ValueError): a file on disk that is damaged, incomplete, of another format, or made
  for another model, corpus or config (cache shards and manifests, circuits, SAEs, checkpoints, reports);
  the cache reader and writer catch it to name every damaged shard.
- `DiskFullError` (OSError): the disk filled up during a harvest; carries the errno.
- `ModelSpecError` (ValueError): a model spec that names no model, or a model folder or Hub id that cannot be
  converted (re-exported as `workbench.models.ModelSpecError`; caught by bench/sae/sae_bench.py).
Elsewhere, kept because code catches them or they stand apart:
- `workbench.lock.OutputBusyError` (BlockingIOError): another run holds the output's lock.
- `workbench.attention.train.ConstraintNotMet`: the run ended with no evaluated state meeting the
  loss target (its own message; the best state is saved).
- `workbench.sae.trainer.NonFiniteError` (RuntimeError): a NaN/inf batch or loss, or a diverged run.
- `workbench.circuits.inputs.QueryError` and its `workbench.circuits.search.ZeroGapError`: a circuit query
  that cannot be answered; ZeroGapError (clean and corrupt agree) is caught by the circuit API and reports.
- `workbench.browse.OutsideWorkspace` and `app.live.ModelNotFound`: the read side's path and model look-ups.
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


class ConfigError(UserError, ValueError):
    """A config value is invalid; the message names the value and the valid choices."""


class DamagedFileError(UserError, ValueError):
    """A file on disk is damaged, incomplete or not what the command reads (another format, model or corpus)."""


class DiskFullError(UserError, OSError):
    """The disk filled up during a harvest; the shards completed before it stay valid and resumable."""


class ModelSpecError(UserError, ValueError):
    """A model spec that names no embedded model, saved folder, Hugging Face folder or TransformerLens model."""


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

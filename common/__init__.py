"""Mechanisms every part of the project shares, one of each: file writing and reading
(`common.files`), progress display (`common.progress`) and the user-error type
(`common.errors`). Nothing here imports TensorFlow, Horovod or a flag library."""

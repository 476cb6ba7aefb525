"""Mechanisms every part of the project shares, one of each: file writing and reading
(`common.files`), progress display (`common.progress`), the user-error type (`common.errors`),
the kinds of value a setting can hold (`common.kinds`), how entry points parse flags and report
errors (`common.cli`), TensorFlow's quiet start-up (`common.tensorflow_startup`) and the
heartbeat files that tell a live process from a lost one across hosts (`common.heartbeat`).

Importing any of them is cheap: the flag library (absl, in `common.cli`) and TensorFlow (in
`common.files`, for gs:// globs only) are imported inside the functions that need them, and
nothing here imports Horovod."""

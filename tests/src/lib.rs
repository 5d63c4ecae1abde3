//! Helpers shared by the cross-process tests in `tests/tests/`.

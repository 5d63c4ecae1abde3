//! sluice client library.

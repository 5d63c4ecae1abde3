//! # sluice-cli
//!
//! The operator's side of the `sluice` command as library code: what the
//! commands that talk to a daemon or write a model's manifest do. The
//! binary (`src/main.rs`, one file per subcommand in `src/command/`)
//! parses the arguments and calls this crate, `sluice-bench` (the
//! benchmarks and the demo) and `sluice_cuda::measure` (`check` and
//! `profile` on CUDA).
//!
//! - [`status`]: `sluice status`, every page of the daemon's status, and
//!   its table;
//! - [`top`]: `sluice top`, the live view: latency over a window of
//!   status documents, and the screen drawn from one;
//! - [`models`]: `sluice models list|load|unload|rescan`, a running
//!   daemon's model repository;
//! - [`profile_sim`]: `sluice profile --device <profile>`, a model's
//!   latency per batch and partition size on the GPU model, written into
//!   a manifest;
//! - [`model_file`]: `sluice run MODEL.onnx` and `sluice inspect
//!   MODEL.onnx`, one ONNX model outside the daemon;
//! - [`split_cmd`]: `sluice split MODEL`, SPLIT's evenly sized blocks (the
//!   GA and the exhaustive optimum of `sluice-split`).
//!
//! A library of the workspace never imports this crate.

pub mod model_file;
pub mod models;
pub mod profile_sim;
pub mod split_cmd;
pub mod status;
pub mod top;

pub use sluice_service::error_chain;

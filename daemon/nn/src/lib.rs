//! # sluice-nn
//!
//! Neural-network layers for the real backends: CPU reference operators
//! ([`reference`]) that check GPU results, and builders ([`builders`]) that turn the
//! DISB models' real layer shapes into kernel plans and model manifests.

pub mod builders;
pub mod graph_manifest;
pub mod reference;

//! CPU reference operators.

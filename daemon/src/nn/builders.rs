//! Model builders.

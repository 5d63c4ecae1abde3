//! The patched NVIDIA open kernel modules (filled in by the nvidia-open patch work).

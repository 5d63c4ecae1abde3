//! The patched amdkfd (filled in by the amdgpu patch work).

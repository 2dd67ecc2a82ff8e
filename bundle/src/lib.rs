//! poot-bundle: the `.pbundle` file format.
//!
//! It will own the serde types of a bundle (targets, entries, kernels, dispatch lists, slot
//! layout, weight map, weights), writing, and `open` with its checks (magic, format version,
//! per-section checksums, target). Filled by the bundle issue.

//! poot-compiler: checkpoint readers, model families, graph passes.

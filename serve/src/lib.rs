//! poot-serve: the HTTP API and the continuous-batching scheduling loop over the rows of a
//! decode entry, on top of the runtime's `Driver`. Filled by a later issue.

//! Action decoding: un-normalisation and relative → absolute conversion.

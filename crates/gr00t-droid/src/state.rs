//! State normalisation: min-max to [−1, 1] with q01/q99, clip, pad.

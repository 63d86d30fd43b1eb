//! Initial flow-matching noise: PyTorch's CPU `torch.randn` reproduced from a seed.

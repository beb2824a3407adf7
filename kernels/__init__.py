"""Attention implementations bench can measure: ours and PyTorch's, by name (see registry)."""

"""Attention in plain PyTorch: the smallest kernel repository bench can benchmark."""

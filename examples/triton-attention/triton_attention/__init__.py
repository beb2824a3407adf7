"""A FlashAttention-style forward pass in Triton: a kernel repository bench can benchmark."""

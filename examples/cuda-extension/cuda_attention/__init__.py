"""Attention as a torch C++/CUDA extension built with setup.py: a kernel repository bench can
benchmark."""

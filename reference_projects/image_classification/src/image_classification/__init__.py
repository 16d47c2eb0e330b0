"""A PyTorch training project."""

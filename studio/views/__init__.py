"""Route handlers: each page, its JSON twin and the operator routes."""

"""Process-wide tuning: allocators and the garbage collector."""

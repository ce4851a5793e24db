"""Pure view models: what a page shows, built from replayed histories."""

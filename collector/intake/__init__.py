"""From an accepted export to stored rows: spool, extractor and its worker."""

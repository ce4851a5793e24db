"""statetrail studio: the reading side (web pages and JSON API)."""

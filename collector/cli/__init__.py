"""The `statetrail` command: serve, keys, prune, and the admin client."""

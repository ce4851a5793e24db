"""Background work off the ack path: replay, retention, memory while a burst is stored."""

"""Background work off the ack path: replay, retention, memory, foreground priority."""

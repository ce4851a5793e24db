"""statetrail collector: the receiving side and the data model."""

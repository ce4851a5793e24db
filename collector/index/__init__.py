"""Pure: the field-value index and the filter language."""

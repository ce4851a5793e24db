"""Pure: OTLP protobuf bytes to span records and wire maps."""

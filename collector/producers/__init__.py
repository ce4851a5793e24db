"""Pure: what each producer's telemetry means (Junjo's contract)."""

"""Pure: JSON documents, the selected chain, replay, history, findings, provenance."""

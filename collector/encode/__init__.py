"""Encode stage: an export's decoded spans and evidence as the Arrow rows of one write.

An export becomes an IngestBatch (exports.py), a group of them one PreparedWrite
(rows.py), span bytes compressed chunks (span_bytes.py), states and graphs packed
documents (documents.py). No SQL and no DuckDB, so the extraction worker never imports
it; the store reads documents and chunks back with the same modules.
"""

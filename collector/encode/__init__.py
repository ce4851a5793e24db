"""Encode stage: an export's decoded spans and extracted evidence as the Arrow
rows of one write, built without the database.

Between extraction (collector/producers/junjo.py) and storage (collector/store/): an
export request's bytes become an IngestBatch (exports.py), a group of batches
one PreparedWrite (rows.py), with span bytes in compressed chunks
(span_bytes.py) and states and graphs as packed documents (documents.py). No
SQL and no DuckDB here, so the extraction worker's process
(collector/intake/worker.py) does all of this without importing it; the
store reads documents and chunks back with the same modules.
"""

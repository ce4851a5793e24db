"""Helpers the tests and benchmarks share; none of them is a test or a mock.

`servers` runs a real `statetrail serve` on free loopback ports and sends it captured
requests; `polling` waits for a condition; `seeds` names the seeds of random runs;
`otlp_craft` and `otlp_strategies` build OTLP requests by hand and by hypothesis;
`history_records` and `fixture_records` build replay inputs; `crashload` drives exporter
load for the crash and overload tests; `browser` holds the Chromium fixtures;
`proxy` is a path-stripping reverse proxy.
"""

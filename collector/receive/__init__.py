"""Receiving OTLP exports over gRPC and HTTP: auth, admission, answers."""

"""Shared code of every reviewloop service: contract, config, ids, errors, storage, gRPC, telemetry."""

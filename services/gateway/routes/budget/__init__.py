"""The dispatch_budget routes, one module per spec section: ``rounds`` (spec 003: runs, admissions,
settlements, the round budget, extensions), ``journals`` (spec 002: attempt journals and their evidence),
``catalog`` (spec 003: runners, the review configuration, sequences, mode resolution, session lineage) and
``gate`` (spec 001: session turns, the review-run gate and its decision log)."""

# The JSON-lines media types a journal append reads and the decision log answers.
JSONL = ("application/x-ndjson", "application/jsonl", "application/json-lines")

"""The shared review-dispatch package of spec 003: selection, sequences, mode resolution, the picker.

``selection``: the four dimensions, the runner catalog entry, the one validator and serializer, and
``resolve_review_mode``. ``picker``: ``ReviewDispatchViewModel``, the one state every picker renders.
Pure (only ``reviewloop.errors``), so dispatch_budget's domain, the gateway's console and the CLI all
use the same rules.
"""

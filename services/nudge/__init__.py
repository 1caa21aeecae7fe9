"""nudge: the durable, per-review sequenced queue agents drain (spec 000, "Nudge")."""

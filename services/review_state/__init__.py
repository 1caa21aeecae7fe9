"""review_state: reviews, revisions, turns, messages, contacts and the review policy (spec 000)."""

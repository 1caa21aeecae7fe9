"""diff: deterministic structured diffs between revisions of a message (spec 000, diff_json)."""

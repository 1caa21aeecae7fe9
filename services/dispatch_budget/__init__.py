"""dispatch_budget: reviewer rounds (spec 003), the review-run gate (001), attempt evidence (002)."""

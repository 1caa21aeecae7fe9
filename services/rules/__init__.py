"""rules: writing rules, categories, graduation and the risk dial (spec 000)."""

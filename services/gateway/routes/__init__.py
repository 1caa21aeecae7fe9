"""One router per context, so each context's routes live in one file."""

"""Everything that talks to a language model lives in this package (and nowhere else)."""

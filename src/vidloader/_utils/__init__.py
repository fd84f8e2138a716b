"""Private helpers usable by every layer."""

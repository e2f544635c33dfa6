"""See docs/architecture.md for the layer map."""

"""One handler module per family of capture keys; each registers itself with the
conformance registry. See docs/architecture.md."""

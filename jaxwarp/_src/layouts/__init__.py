"""Where values live: named register layouts, WMMA fragments, mma.sync and wgmma register
fragments, shared-memory descriptors and ldmatrix. See docs/architecture.md."""

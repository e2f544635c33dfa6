"""The instruction catalogue: what every instruction accepts (isa), the targets and their
datapath presets (arch), the WMMA table and the PTX qualifier parsers. The bottom of the
tensor-core stack; see docs/architecture.md."""

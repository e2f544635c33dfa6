"""Front-ends of AMD's matrix cores: the ``v_mfma_*`` instructions of CDNA1, CDNA2 and
CDNA3 (``mfma``). See docs/amd.md."""

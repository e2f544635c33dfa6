"""2:4 structured sparsity helpers for the sparse tensor cores (``mma.sp``, ``wgmma.sp``):
prune a dense matrix by magnitude, compress it to stored elements and their indices,
expand it back, and build the metadata register of every lane (``docs/sparse.md``). The
sparse instructions themselves are ``jaxwarp.mma_sp``, ``jaxwarp.mma_sp_logical`` and
``jaxwarp.wgmma_sp_logical``; ``jaxwarp.matmul(..., sparsity="2:4")`` runs a GEMM of them,
and ``as_2_4`` marks a weight whose products ``jaxwarp.emulate`` runs on them."""

from jaxwarp._src.instructions.sparse import compress_2_4 as compress_2_4
from jaxwarp._src.instructions.sparse import decompress_2_4 as decompress_2_4
from jaxwarp._src.instructions.sparse import metadata_words as metadata_words
from jaxwarp._src.instructions.sparse import prune_2_4 as prune_2_4
from jaxwarp._src.instructions.sparse_marker import as_2_4 as as_2_4

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

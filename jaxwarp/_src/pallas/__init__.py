"""Pallas kernels on the emulated tensor core.

``emulate`` meets a ``pallas_call`` and calls :func:`run_pallas_call`: the kernel body is
rewritten so that every product in it is the instruction chain the kernel's compiler
issues (``triton.py`` for Triton-style kernels, ``mosaic_gpu.py`` for Mosaic GPU ones),
then JAX's Pallas interpreter runs it over the grid. ``rewrite.py`` holds the rewriting
(products kept pending so that an add folds into a product's accumulator), ``model.py``
the settings and the records of what ran.
"""

from __future__ import annotations

import importlib

from jaxwarp._src.pallas.model import KernelModel, KernelProduct, KernelProductError
from jaxwarp._src.pallas.rewrite import contains_dot

__all__ = ["KernelModel", "KernelProduct", "KernelProductError", "contains_dot",
           "run_pallas_call"]


def _looks_mosaic_gpu(eqn) -> bool:
    p = eqn.params
    return any("mosaic_gpu" in type(x).__module__
               for x in (p.get("compiler_params"), p.get("interpret"), p.get("mesh")))


def run_pallas_call(eqn, invals, model: KernelModel):
    """Runs a ``pallas_call`` equation with its products modelled: ``(outputs,
    products)``, ``products`` a tuple of :class:`KernelProduct`.

    Raises:
        KernelProductError: a kernel or a product no modelled instruction runs.
    """
    try:
        mosaic_gpu = importlib.import_module("jaxwarp._src.pallas.mosaic_gpu")
    except ModuleNotFoundError as e:
        if e.name != "jaxwarp._src.pallas.mosaic_gpu":
            raise
        mosaic_gpu = None
    if mosaic_gpu is not None and mosaic_gpu.is_mosaic_gpu(eqn):
        return mosaic_gpu.run_kernel(eqn, invals, model)
    if mosaic_gpu is None and _looks_mosaic_gpu(eqn):
        raise KernelProductError("Mosaic GPU kernels are not modelled")
    triton = importlib.import_module("jaxwarp._src.pallas.triton")
    if not triton.is_triton_style(eqn):
        cp = eqn.params.get("compiler_params")
        raise KernelProductError(
            f"a pallas_call with compiler params {type(cp).__name__} "
            f"({type(cp).__module__}): modelled are Triton-style kernels (Triton compiler "
            f"params or none) and Mosaic GPU kernels")
    return triton.run_kernel(eqn, invals, model)

"""Pallas kernels on the emulated tensor core.

``emulate`` meets a ``pallas_call`` and calls :func:`run_pallas_call`: the kernel body is
rewritten so that every product in it is the instruction chain the kernel's compiler
issues (``triton.py`` for Triton-style kernels, ``mosaic_gpu.py`` for Mosaic GPU ones),
then JAX's Pallas interpreter runs it over the grid. ``rewrite.py`` holds the rewriting
(products kept pending so that an add folds into a product's accumulator), ``model.py``
the settings and the records of what ran.
"""

from __future__ import annotations

from jaxwarp._src.pallas import mosaic_gpu, triton
from jaxwarp._src.pallas.model import KernelModel, KernelProduct, KernelProductError
from jaxwarp._src.pallas.mosaic_gpu import is_mosaic_gpu, target_sm_count
from jaxwarp._src.pallas.rewrite import contains_dot

__all__ = ["KernelModel", "KernelProduct", "KernelProductError", "contains_dot",
           "is_mosaic_gpu", "run_pallas_call", "target_sm_count"]


def run_pallas_call(eqn, invals, model: KernelModel):
    """Runs a Pallas kernel equation (a ``pallas_call``, or the ``custom_vmap_call`` /
    ``mpmd_map`` of ``plgpu.kernel``) with its products modelled: ``(outputs,
    products)``, ``products`` a tuple of :class:`KernelProduct`.

    Raises:
        KernelProductError: a kernel, a setting or a product no modelled instruction runs.
    """
    if is_mosaic_gpu(eqn):
        try:
            outs, products = mosaic_gpu.run_kernel_and_sites(eqn, invals, model)
        except KernelProductError:
            raise
        except (ValueError, NotImplementedError) as e:  # the model's refusals, named there
            raise KernelProductError(f"Mosaic GPU kernel: {e}") from e
        return outs, products
    if not triton.is_triton_style(eqn):
        cp = eqn.params.get("compiler_params")
        raise KernelProductError(
            f"a pallas_call with compiler params {type(cp).__name__} "
            f"({type(cp).__module__}): modelled are Triton-style kernels (Triton compiler "
            f"params or none) and Mosaic GPU kernels")
    return triton.run_kernel(eqn, invals, model)

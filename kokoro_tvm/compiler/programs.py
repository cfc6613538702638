"""Decomposed programs kept for this process, so that one shape built at several precisions is exported once.

torch.export and PyTorch's decompositions are most of a build (the symbolic decoder on a 2-core Xeon: 24 s
export and 77 s decomposition of ~146 s), and what they make does not depend on the precision or the target:
those act after the import (pipeline.lift_weight_transforms, pipeline.compile_relax). `bench` on a new machine
builds the five components at fp32, bf16 and int8 in one process, and a notebook or the test suite builds
`say`'s default precision after `compile`'s fp32: each shape is then exported and decomposed once.

A kept program is keyed by the weights' fingerprint and the spec's shape and dtype, and is used only if every
tensor it holds equals the model's own (read under the export patches, which fold the weight norms as export
does): a model with other weights under the same fingerprint is exported afresh, never built from another's
program. The newest KEPT programs stay; each holds its weights (the model's own tensors while that model lives).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

import torch

from kokoro_tvm.compiler.export import component_module
from kokoro_tvm.compiler.patches import export_patches

log = logging.getLogger(__name__)

# two dtypes' five builds: a float64 reference built between two float32 precisions (as `make test` does) does
# not push the float32 programs out; at most two models' weights are held after the models are gone
KEPT = 10
_kept: OrderedDict[tuple, torch.export.ExportedProgram] = OrderedDict()
_lock = threading.Lock()


def _key(weights_fingerprint: str, spec) -> tuple:
    return (weights_fingerprint, spec.component, spec.length, spec.batch, spec.symbolic, spec.dtype)


def same_weights(program: torch.export.ExportedProgram, model, component: str) -> bool:
    """Whether `program` holds exactly the tensors `model`'s component would be exported with."""
    with export_patches(model), torch.no_grad():
        tensors = component_module(model, component).state_dict()
        held = program.state_dict
        return tensors.keys() == held.keys() and all(torch.equal(tensors[k], held[k]) for k in tensors)


def kept_program(model, weights_fingerprint: str, spec) -> torch.export.ExportedProgram | None:
    """The program this process decomposed for `spec` from these weights, or None."""
    with _lock:
        program = _kept.get(_key(weights_fingerprint, spec))
    if program is None:
        return None
    if not same_weights(program, model, spec.component):
        log.info(
            "%s: the kept program holds other weights under %s; exporting again", spec.component, weights_fingerprint
        )
        return None
    log.info("%s: reusing the program exported and decomposed for an earlier build of this shape", spec.component)
    with _lock:
        _kept.move_to_end(_key(weights_fingerprint, spec))
    return program


def keep_program(weights_fingerprint: str, spec, program: torch.export.ExportedProgram) -> None:
    """Keep `program` (decomposed, as relax_module returns it) for later builds of the same shape."""
    with _lock:
        _kept[_key(weights_fingerprint, spec)] = program
        _kept.move_to_end(_key(weights_fingerprint, spec))
        while len(_kept) > KEPT:
            _kept.popitem(last=False)


def forget_programs() -> None:
    """Drop every kept program (and the weights they hold)."""
    with _lock:
        _kept.clear()

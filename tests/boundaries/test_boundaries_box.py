"""The box form of an obstacle's conditions (lbm.boundaries.box): bitwise the dense rules, on a box, on a TPU."""

import dataclasses

import numpy as np
import pytest
from helpers.boundaries import dfg_like
from helpers.steps import advanced

import lbm.boundaries.box as box
from lbm.boundaries import FullwayBounceBack, InterpolatedBounceBack
from lbm.boundaries.box import BoxBlock, InBox
from lbm.engines.xla import XlaEngine
from lbm.lattice import D2Q9, D3Q19


def fullway_like(lattice, shape):
    """dfg_like with the cylinder's default wall instead: full-way bounce-back on the disc's cells."""
    setup = dfg_like(lattice, shape)
    return dataclasses.replace(setup, boundaries=tuple(
        FullwayBounceBack(solid=np.asarray(bc.solid)) if isinstance(bc, InterpolatedBounceBack) else bc
        for bc in setup.boundaries))


@pytest.mark.parametrize("make, lattice, shape", [
    pytest.param(dfg_like, D2Q9, (60, 30), id="interpolated-d2q9", marks=pytest.mark.slow),  # 4.4 CPU-s (TPU-only forms)
    pytest.param(fullway_like, D2Q9, (60, 30), id="fullway-d2q9", marks=pytest.mark.slow),
    pytest.param(fullway_like, D3Q19, (30, 15, 4), id="fullway-d3q19", marks=pytest.mark.slow)])
def test_the_box_forms_step_bitwise_like_the_dense_rules_without_a_view_of_every_cell(make, lattice, shape,
                                                                                      monkeypatch):
    """The xla engine runs the obstacle's wall and momentum exchange on the box around it (here on the CPU too): the
    same populations and forces to the last bit as the dense rules over the whole grid, and its program never views
    the populations as (Q, cells) (the dense rules' gather and scatter do). Off the box platforms the dense rules
    run, as lowered."""
    setup = make(lattice, shape)
    assert box.BOX_PLATFORMS == ("tpu",)
    default = XlaEngine(setup)
    forms = [bc for bc in default.params if isinstance(bc, InBox)]
    assert sorted(bc.stage for bc in forms) == ["bounce_back", "forces"]
    assert all(np.prod(bc.shape) <= box.BOX_FRACTION * np.prod(shape) for bc in forms)
    f0 = setup.initial_populations()
    every_cell = f"tensor<{lattice.q}x{int(np.prod(shape))}xf32>"
    assert every_cell in default.lower(f0, 2).as_text()  # the momentum exchange gathers on (Q, cells)

    monkeypatch.setattr(box, "BOX_PLATFORMS", ("cpu", "tpu"))
    boxed = XlaEngine(setup)
    assert every_cell not in boxed.lower(f0, 2).as_text()
    f_box, aux_box = advanced(boxed, setup, 2)
    monkeypatch.setattr(box, "BOX_FRACTION", -1.0)
    dense = XlaEngine(setup)
    assert not any(isinstance(bc, InBox) for bc in dense.params)
    f_dense, aux_dense = advanced(dense, setup, 2)
    np.testing.assert_array_equal(f_box, f_dense)
    assert aux_box.keys() == aux_dense.keys() and "force" in aux_box
    for key in aux_box:
        np.testing.assert_array_equal(aux_box[key], aux_dense[key])
    assert np.abs(aux_box["force"]).max() > 0


def test_a_box_block_refuses_a_cell_outside_it():
    """Box positions are C-order inside the box; a cell outside it is an error, not a wrapped position."""
    block = BoxBlock(D2Q9, (10, 8), (2, 3), (4, 2))
    inside = np.ravel_multi_index(([2, 5, 3], [3, 4, 4]), (10, 8))
    np.testing.assert_array_equal(block.index_of(inside), [0, 7, 3])
    np.testing.assert_array_equal(block.cells[block.index_of(inside)], inside)
    with pytest.raises(ValueError, match="outside the box"):
        block.index_of(np.ravel_multi_index(([6], [3]), (10, 8)))

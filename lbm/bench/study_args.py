"""The options of the studies that import JAX (batching, compile, export), parsed without importing it.

``python -m lbm study NAME --help`` prints these parsers' help from here, so that help never waits for JAX;
each study's ``main`` parses its arguments with the same parser.
"""

from __future__ import annotations

import argparse

from lbm.config.command_line import ArgumentParser

STRATEGIES = ("loop", "map", "vmap")
"""How the batching study runs B members: a Python loop inside one jit, lax.map, vmap."""


def batching_parser() -> argparse.ArgumentParser:
    """The options of ``study batching``."""
    parser = ArgumentParser(prog="python -m lbm study batching",
                            description="B Taylor-Green vortices in one jit: Python loop, lax.map and vmap against B.")
    parser.add_argument("--members", default="1,2,4,8,16,32,64", help="ensemble sizes B, comma-separated")
    parser.add_argument("--grid", type=int, default=64, help="cells per side of each member's periodic box")
    parser.add_argument("--steps", type=int, default=100, help="steps per member in one call")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement")
    parser.add_argument("--map-batch", type=int, default=None, help="lax.map batch_size (default: none)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="subset of loop,map,vmap")
    parser.add_argument("--out", default=None, help="output directory (default outputs/studies/batching/<time>)")
    return parser


def compile_parser() -> argparse.ArgumentParser:
    """The options of ``study compile``."""
    parser = ArgumentParser(prog="python -m lbm study compile",
                            description="Compile time against grid size and steps per dispatch; AOT and caches.")
    parser.add_argument("--grids", default="64,128,256,512", help="square grid sizes (periodic Taylor-Green box)")
    parser.add_argument("--steps", default="1,10,100,1000", help="steps per dispatch to compare")
    parser.add_argument("--out", default=None)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (e.g. lattice=d3q19 grid.nz=32)")
    return parser


def export_parser() -> argparse.ArgumentParser:
    """The options of ``study export`` (its other arguments are overrides, as for run)."""
    parser = ArgumentParser(prog="python -m lbm study export", usage="%(prog)s [--out DIR] [overrides]",
                            description="Export every stage and a 10-step fused chunk of one configuration with "
                            "jax.export (CPU and CUDA), with their input shapes and a manifest.json; overrides "
                            "(key=value, as for run) choose the configuration. python scripts/rerun_export.py DIR "
                            "re-times the bundle without lbm.")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="directory of the bundle (default outputs/export/<case>_<grid>)")
    return parser


PARSERS = {"batching": batching_parser, "compile": compile_parser, "export": export_parser}
"""The studies whose help is printed from here."""

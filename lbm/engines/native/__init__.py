"""The native CPU engine: generated C++ kernels (codegen.py, kernels.cc, build.py), the boundary plan (plan.py)."""

"""Writing results: fields (npz), metrics (json) and plots (png)."""

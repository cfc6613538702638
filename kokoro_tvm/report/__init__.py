"""What notebooks record (metrics.json), the shared report (index.html), and the papermill notebook runner."""

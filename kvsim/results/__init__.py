"""A run's results: its tables, summary metrics and exports."""

from kvsim.results.tables import Results, build_results, read_summary

__all__ = ["Results", "build_results", "read_summary"]

"""Tables and figures for reports."""

from .tables import comparison_rows, format_table

__all__ = ["comparison_rows", "format_table"]

"""Tables and figures for reports."""

from privreid.reporting.tables import comparison_rows, format_table

__all__ = ["comparison_rows", "format_table"]

"""HTML reports: one page per participant, and one for the group level."""

from prfmap.report.context import ReportContext

__all__ = ["ReportContext"]

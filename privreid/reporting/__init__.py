"""Reports of several models: the comparison suite's report (:mod:`privreid.reporting.suite`)."""

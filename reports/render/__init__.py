"""Rendering the report (Markdown, HTML, figures) from :mod:`reports.stats`' result objects."""

"""Control-variant specs (DESIGN section 3): each ``*.toml`` here is one control.

A control is data, not model code: a spec maps the attention roles q, k, v to routes
built from named pseudo-queries (see :mod:`harness.models.spec` for the format).
``harness.models`` finds this folder (without importing this package) and reads the
files; adding a control means adding a file here plus a row in the identity tests,
nothing else.
"""

"""Control-variant specs (DESIGN section 3): each ``*.toml`` here is one control.

A control is data, not model code: a spec maps the attention roles q, k, v to routes
built from named pseudo-queries (see :mod:`harness.models.spec` for the format).
``harness.models`` finds this folder and reads the files; adding a control means
adding a file here plus a row in the identity tests, nothing else.
"""

from pathlib import Path

SPEC_DIR = Path(__file__).parent


def control_specs():
    """All control specs in this folder, by name (validated)."""
    from harness.models.spec import load_spec_file

    return {p.stem: load_spec_file(p) for p in sorted(SPEC_DIR.glob("*.toml"))}

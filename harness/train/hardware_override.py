"""``$HARNESS_HARDWARE_CLASS``, the hardware class a user sets in place of the detected one
(:mod:`harness.train.environment`, DESIGN section 13), checked without importing torch: ``harness
launch`` refuses a bad value before it starts a worker as fast as ``harness work`` refuses it at its start
(importing :mod:`harness.train.environment` took 20-23 s on a loaded 2-core machine).
"""

from __future__ import annotations

import os
import re

from harness.common.terms import UNKNOWN

#: Replaces the detected hardware class (tests; nodes known to compute alike). See :mod:`harness.train.environment`.
HARDWARE_CLASS_ENV = "HARNESS_HARDWARE_CLASS"
_CLASS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,199}")  # with fullmatch: "$" passes a trailing newline
#: Characters of a refused ``$HARNESS_HARDWARE_CLASS`` echoed in its error line (a 10 KB value is cut).
SHOWN_CHARS = 80


def class_override() -> str | None:
    """``$HARNESS_HARDWARE_CLASS`` (surrounding blanks dropped), or ``None`` where it is unset or blank.

    Raises:
        ValueError: it is not a short key: one line, the value cut to :data:`SHOWN_CHARS` characters (with its
            length), naming what is allowed (letters, digits, ``._+/-``, at most 200, starting with a letter or
            digit; not ``unknown``, which means a run whose class was never recorded).
    """
    override = os.environ.get(HARDWARE_CLASS_ENV, "").strip()
    if not override:
        return None
    if not _CLASS_RE.fullmatch(override) or override == UNKNOWN:
        shown = repr(override[:SHOWN_CHARS])
        if len(override) > SHOWN_CHARS:
            shown += f"... ({len(override)} characters)"
        raise ValueError(
            f"${HARDWARE_CLASS_ENV}={shown}: expected a short key of letters, digits and ._+/- (at "
            f"most 200, starting with a letter or digit; not {UNKNOWN!r}), or unset it to use the detected class"
        )
    return override


__all__ = ["HARDWARE_CLASS_ENV", "SHOWN_CHARS", "class_override"]

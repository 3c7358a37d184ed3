"""The library's one logger, ``memacct``: a library logs, its caller decides what is shown.

A :class:`logging.NullHandler` keeps Python's last-resort handler from printing the
library's warnings on stderr when the program configured no logging; what a plan assumed
is in its ``notes`` (and a profile's doubts in its ``warnings``), and the command line
shows the warnings itself (:func:`memacct.cli.main`).
"""

from __future__ import annotations

import logging

__all__ = ["logger"]

logger = logging.getLogger("memacct")
logger.addHandler(logging.NullHandler())

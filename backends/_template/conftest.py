"""Lets the template's tests run from the source tree before it is installed.

Delete this file in your copy once you install it (``pip install -e .``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

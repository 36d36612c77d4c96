"""adapters/watch: watchdog's unused ``ctypes.util`` (and ``subprocess``) is imported only on use.

A fresh interpreter each: what a start imports is the point.
"""

import subprocess
import sys

PROBE = """
import sys
import kvdev.guest.adapters.watch
print('subprocess' in sys.modules)
import ctypes.util
print(bool(ctypes.util.find_library('c')), 'subprocess' in sys.modules)
from ctypes.util import find_library
print(find_library is sys.modules['ctypes.util'].find_library)
"""


def test_ctypes_util_is_imported_when_first_used_and_works_then():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True
    ).stdout.split()
    assert out == ["False", "True", "True", "True"]


def test_a_module_imported_already_is_left_as_it_is():
    probe = "import ctypes.util, sys\nimport kvdev.guest.adapters.watch\n"
    probe += "print(type(sys.modules['ctypes.util']).__name__)"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "module"

"""The libraries a machine's loader finds without any RPATH: ld.so.cache, the default directories, the GPU driver.

Shared by ``doctor`` (which dependencies the layout cannot be blamed for) and ``observe`` (which mapped
files are the system's, not the wheel set's), so both read the machine the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess

# Installed with the GPU driver on the machine that runs the code, never shipped in wheels:
# a build host without a GPU lacking them says nothing about the target.
DRIVER_LIBRARIES = frozenset({"libcuda.so.1", "libnvidia-ml.so.1"})
_SYSTEM_DIRECTORIES = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)


def ld_so_cache() -> dict[str, str]:
    """File name -> path of the libraries ``ldconfig -p`` lists (the loader's cache), first entry of a name winning."""
    ldconfig = shutil.which("ldconfig") or next(
        (path for path in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(path)), None
    )
    if not ldconfig:
        return {}
    listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
    found: dict[str, str] = {}
    for line in listing.splitlines()[1:]:
        name, _, path = line.strip().partition(" => ")
        if name:
            found.setdefault(name.split()[0], path)
    return found


def system_library_names() -> frozenset[str]:
    """File names the loader finds without any RPATH: ld.so.cache, the default directories, GPU driver libraries."""
    names: set[str] = set(DRIVER_LIBRARIES) | set(ld_so_cache())
    for directory in _SYSTEM_DIRECTORIES:
        try:
            names.update(os.listdir(directory))
        except OSError:
            continue
    return frozenset(names)

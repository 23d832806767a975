"""Install schemes: where an installer puts a wheel's member, from its archive path alone.

A member lands in site-packages unless it sits under ``<dist>.data/<scheme>/``: ``purelib`` and
``platlib`` land in site-packages too, ``data``, ``scripts`` and ``headers`` outside it (pip: under the
prefix; rules_python: beside site-packages in the wheel's repository).  A wheel fact, not an ELF one:
the library graph, the preload, the layouts and the split all ask it, each about members of any kind.
"""

from __future__ import annotations

import re

__all__ = ["data_scheme", "install_path"]

# Wheel members under <dist>.data/purelib|platlib/ install into site-packages.
_DATA_TO_SITE_PACKAGES = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")
# Members under <dist>.data/data|scripts|headers/ install outside site-packages (pip: the prefix; rules_python:
# the wheel's repository), so their install path keeps the prefix.
_OTHER_SCHEME = re.compile(r"^(?P<dist>[^/]+)\.data/(?P<scheme>data|scripts|headers)/(?P<rest>.+)$")


def install_path(member: str) -> str | None:
    """Where an archive member lands: relative to site-packages, or, for the ``data``, ``scripts`` and
    ``headers`` schemes, the member's own path (its ``<dist>.data/<scheme>/`` prefix says where an
    installer puts it: see :func:`data_scheme`); None for a scheme no installer knows."""
    if not member.partition("/")[0].endswith(".data"):  # nearly every member, and every member is asked
        return member
    if _DATA_TO_SITE_PACKAGES.match(member):
        return _DATA_TO_SITE_PACKAGES.sub("", member, count=1)
    return member if data_scheme(member) else None


def data_scheme(path: str) -> tuple[str, str, str] | None:
    """``(dist, scheme, rest)`` of an install path outside site-packages (``CyFES-2.7.data/data/cyfes/x.so`` ->
    ``("CyFES-2.7", "data", "cyfes/x.so")``); None for a site-packages path."""
    match = _OTHER_SCHEME.match(path)
    return (match["dist"], match["scheme"], match["rest"]) if match else None

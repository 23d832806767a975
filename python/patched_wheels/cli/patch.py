"""``patched-wheels patch``: write a patched, re-versioned copy of one wheel.

``--wheel``, ``--dest-dir``, ``--suffix`` and ``--patch-dir`` mean what they mean in the
``wheel_patcher`` script, so its users can switch.  Prints the output path, then the
requirement that pins it (``torch==2.1.0+stripe.5``), one per line.

``--set-rpath``, ``--prepend-rpath`` and ``--add-rpath GLOB=ENTRIES`` rewrite the search
path (DT_RUNPATH/DT_RPATH, kind kept) of every ELF member matching GLOB, in the order
given; ENTRIES are ``:``-separated and each starts with ``$ORIGIN``.  They are the
``rpath_mode`` values ``set``, ``prepend`` and ``append`` of ``patched_wheel``.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from patched_wheels.base.names import package_path
from patched_wheels.cli import add_cache_option, caches, check_code, check_directory, described, whole_number
from patched_wheels.errors import UsageError
from patched_wheels.patch.surgery import PatchOptions, find_patches, patch_wheel
from patched_wheels.patch.version import with_local_suffix

if TYPE_CHECKING:
    from patched_wheels.loading.preloadfiles import PackagePreload
    from patched_wheels.patch.request import RpathEdit
    from patched_wheels.phrasing import Phrasing

# Flag -> RPATH edit mode (the Starlark `rpath_mode` value).
RPATH_FLAGS = {"--set-rpath": "set", "--prepend-rpath": "prepend", "--add-rpath": "append"}
_RPATH_HELP = {
    "set": "replace the RPATH/RUNPATH of matching ELF members with ENTRIES ($ORIGIN-relative, ':'-separated)",
    "prepend": "put ENTRIES before the existing RPATH/RUNPATH entries",
    "append": "put ENTRIES after the existing RPATH/RUNPATH entries",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "patch",
        help="patch a wheel: unified diffs, METADATA edits, PEP 440 local version",
        description=described(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--wheel", type=Path, required=True, help="the upstream wheel")
    parser.add_argument("--dest-dir", type=Path, required=True, help="directory for the patched wheel")
    parser.add_argument("--suffix", help="local version label to append, e.g. stripe.5 -> 2.1.0+stripe.5")
    parser.add_argument("--patch-dir", type=Path, help="apply every *.patch/*.diff in this directory, sorted by name")
    parser.add_argument(
        "--patch", type=Path, action="append", default=[], help="a unified diff (repeatable; after --patch-dir's)"
    )
    parser.add_argument(
        "--strip",
        type=whole_number(0, "a number of path components (0 or more)"),
        default=1,
        metavar="N",
        help="leading path components to strip (default 1)",
    )
    parser.add_argument(
        "--remove-requires", action="append", default=[], metavar="NAME", help="drop Requires-Dist of this project"
    )
    parser.add_argument("--add-requires", action="append", default=[], metavar="SPEC", help="add a Requires-Dist")
    parser.add_argument(
        "--delete",
        action="append",
        default=[],
        metavar="GLOB",
        help="delete matching members (fnmatch on archive paths)",
    )
    parser.add_argument("--verify", action="store_true", help="check every member's hash against RECORD first")
    parser.add_argument(
        "--preload-for", metavar="PKG", help="inject preloads of the shared libraries PKG needs from other wheels"
    )
    parser.add_argument(
        "--preload-from",
        type=Path,
        nargs="+",
        default=[],
        metavar="WHEEL",
        help="the wheels PKG's libraries may come from",
    )
    for flag, mode in RPATH_FLAGS.items():
        parser.add_argument(
            flag,
            dest="rpath",
            action="append",
            default=[],
            type=lambda value, flag=flag: (flag, value),  # one list, so edits apply in command-line order
            metavar="GLOB=ENTRIES",
            help=_RPATH_HELP[mode] + " (repeatable)",
        )
    parser.add_argument(
        "--preload-wheels",
        nargs="+",
        default=[],
        metavar="GLOB",
        help="also preload every library of the --preload-from wheels whose project names match (e.g. 'nvidia-*'), "
        "for code that loads them at run time; one that fails to load is skipped",
    )
    parser.add_argument(
        "--probe",
        metavar="CODE",
        help="with --preload-for: the code run with every wheel in one site-packages whose mapped libraries of other "
        "wheels are preloaded too (default: import PKG; for a plugin that loads lazily, e.g. 'import jax; jax.devices()')",
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help='with --preload-for: run no package code; the preload comes from the ELF graph alone (preload = "elf")',
    )
    add_cache_option(parser)
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    check_directory("--dest-dir", args.dest_dir)
    if args.suffix is not None:
        with_local_suffix("0", args.suffix, "--suffix")  # named as written, before any wheel is read
    preloads = args.preload_for is not None
    if preloads != bool(args.preload_from):
        raise UsageError("--preload-for and --preload-from must be given together")
    if args.preload_wheels and not preloads:
        raise UsageError("--preload-wheels needs --preload-for and --preload-from")
    if args.probe is not None and not preloads:
        raise UsageError("--probe needs --preload-for and --preload-from")
    if args.no_probe and not preloads:
        raise UsageError("--no-probe needs --preload-for and --preload-from")
    if args.no_probe and args.probe is not None:
        raise UsageError("--probe and --no-probe: give one or neither (--no-probe runs no code)")
    if preloads:
        package_path(args.preload_for, "--preload-for")
        if not args.no_probe:
            check_code("--probe", args.probe)
    patches = (find_patches(args.patch_dir, "--patch-dir") if args.patch_dir else []) + args.patch
    options = PatchOptions(
        suffix=args.suffix,
        patches=patches,
        strip=args.strip,
        remove_requires=args.remove_requires,
        add_requires=args.add_requires,
        delete=args.delete,
        verify=args.verify,
        preload=_preload(args, [args.wheel, *args.preload_from]) if preloads else None,
        rpath_edits=_rpath_edits(args.rpath),
    )
    result = patch_wheel(args.wheel, args.dest_dir, options)
    print(result.path)
    print(result.requirement)
    return 0


def _preload(args: argparse.Namespace, wheels: list[Path]) -> PackagePreload | None:
    # Imported here: the ELF analysis is only needed for --preload-for.
    from patched_wheels.loading.preload import ElfOnly, PreloadRequest, Probe, plan_package_preload

    mode = ElfOnly() if args.no_probe else Probe(args.probe)
    return plan_package_preload(
        PreloadRequest(args.preload_for, mode, args.wheel, args.preload_wheels),
        list(dict.fromkeys(wheels)),
        phrasing=_phrasing(args),
        caches=caches(args),
    )


def _phrasing(args: argparse.Namespace) -> Phrasing:
    """How placement errors and probe warnings name this command's flags, and the command to run instead."""
    from patched_wheels.phrasing import Phrasing

    def write(filename: str, module: str) -> str:
        home = next(wheel for wheel in [args.wheel, *args.preload_from] if wheel.name == filename)
        others = [str(wheel) for wheel in dict.fromkeys([args.wheel, *args.preload_from]) if wheel != home]
        probe = f" --probe {shlex.quote(args.probe)}" if args.probe is not None else ""
        return f"--wheel {shlex.quote(str(home))} --preload-for {module} --preload-from {' '.join(map(shlex.quote, others))}{probe} …"

    return Phrasing(
        option=f"--preload-for {args.preload_for}",
        wheel=lambda filename: filename,
        write=write,
        probe=lambda code: f"--probe {shlex.quote(code)}",
    )


def _rpath_edits(options: list[tuple[str, str]]) -> list[RpathEdit]:
    if not options:
        return []
    from patched_wheels.patch.request import parse_rpath_option

    return [parse_rpath_option(value, RPATH_FLAGS[flag], origin=f"{flag} {value!r}") for flag, value in options]

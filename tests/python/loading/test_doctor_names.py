"""doctor prints every name it quotes from a wheel escaped: a member path or a DT_NEEDED name holding a line break or
a terminal control cannot forge a line of its verdict."""

from __future__ import annotations

from patched_wheels.cli import main
from patched_wheels.loading.doctor import Diagnosis, Verdict, format_diagnosis
from patched_wheels.loading.preloadmodule import PreloadList
from support.fakecuda import build_wheel, compile_shared

FORGED = "\npredicted, as is: every library loads with one directory per wheel\n\x1b[2K"
ESCAPED = "\\npredicted, as is: every library loads with one directory per wheel\\n\\x1b[2K"


def test_doctor_prints_member_paths_and_needed_names_escaped(tmp_path, capsys):
    # libtwo.so needs a library whose SONAME (so its DT_NEEDED entry) holds the forged lines; no wheel ships it. The
    # same library also ships under a member path holding them.
    evil = compile_shared(
        tmp_path,
        "libevil.so",
        "int evil(void) { return 1; }\n",
        "-Xlinker",
        "-soname",
        "-Xlinker",
        f"libmissing.so.1{FORGED}",
    )
    two = compile_shared(
        tmp_path, "libtwo.so", "int two(void) { return 2; }\n", "-Wl,--no-as-needed", f"-l:{evil.name}"
    )
    data = two.read_bytes()
    wheel = build_wheel(tmp_path, "demo", "1.0", {f"demo/x{FORGED}demo/y.so": data, "demo/libtwo.so": data})
    assert main(["doctor", "--no-cache", str(wheel)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""
    needs = f"needs libmissing.so.1{ESCAPED}, found in no wheel given nor on this system"
    assert captured.out.splitlines() == [
        f"predicted: demo/libtwo.so ({wheel.name}): {needs}",
        f"predicted: demo/x{ESCAPED}demo/y.so ({wheel.name}): {needs}",
        "predicted, as is: 2 libraries fail to load with one directory per wheel",
    ]


def test_every_line_of_a_diagnosis_is_printable():
    # The lines doctor prints with a package name a wheel gave (its preload's paths, a hint) go through the same escape.
    preload = PreloadList((f"pkg/lib{FORGED}a.so",))
    verdict = Verdict(preload, ())
    text = format_diagnosis(
        Diagnosis(verdict, graph=None, package="pkg", installed=True, generated=verdict, hint=f"load it{FORGED}")  # type: ignore[arg-type]
    )
    assert "\x1b" not in text
    assert [line for line in text.splitlines() if line.startswith("predicted")] == [
        "predicted, as is: every library loads with one directory per wheel",
        "predicted, with the generated preload: every library loads with one directory per wheel",
    ]
    assert f"  1. pkg/lib{ESCAPED}a.so" in text.splitlines() and f"hint: load it{ESCAPED}" in text.splitlines()

"""The binding's ctypes mirror of FlashFwdParams against the C header, as the host compiler
lays it out: a field the header adds, drops, moves or retypes breaks every kernel call
silently (the library reads its arguments at the wrong offsets), so it must break here."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from kernels.flash_attention.api import FlashFp8Params, FlashFwdParams
from kernels.flash_attention.build import CSRC_DIR

HEADER = CSRC_DIR / "flash_api.h"

# What the mirror's ctypes types must be in C: pointer, signed integer or floating point.
_KIND = {
    ctypes.c_void_p: "pointer",
    ctypes.c_int64: "signed",
    ctypes.c_int32: "signed",
    ctypes.c_float: "float",
    ctypes.c_double: "float",
}


def _host_compiler() -> str | None:
    return shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")


def _layout_program(names: list[str], header: Path, struct: str = "FlashFwdParams") -> str:
    """Prints `name offset size kind` per named field, then `sizeof size`; a name the header
    lacks is a compile error."""
    lines = [
        f'    row("{name}", offsetof(P, {name}), sizeof(P::{name}), kind<decltype(P::{name})>());'
        for name in names
    ]
    return "\n".join(
        [
            "#include <cstddef>",
            "#include <cstdio>",
            "#include <type_traits>",
            f'#include "{header}"',
            f"using P = {struct};",
            "template <class T> const char* kind() {",
            '    if (std::is_pointer<T>::value) return "pointer";',
            '    if (std::is_floating_point<T>::value) return "float";',
            '    if (std::is_integral<T>::value && std::is_signed<T>::value) return "signed";',
            '    return "other";',
            "}",
            "static void row(const char* n, size_t o, size_t s, const char* k) {",
            '    std::printf("%s %zu %zu %s\\n", n, o, s, k);',
            "}",
            "int main() {",
            *lines,
            '    std::printf("sizeof %zu\\n", sizeof(P));',
            "}",
        ]
    )


def _header_layout(tmp_path: Path, header: Path = HEADER, mirror=FlashFwdParams) -> list[str]:
    names = [name for name, _ in mirror._fields_]
    compiler = _host_compiler()
    if compiler is None:
        pytest.skip("no host C++ compiler (g++, clang++ or c++)")
    source, binary = tmp_path / "layout.cpp", tmp_path / "layout"
    source.write_text(_layout_program(names, header, mirror.__name__))
    build = subprocess.run(
        [compiler, "-std=c++17", "-o", str(binary), str(source)], capture_output=True, text=True
    )
    assert build.returncode == 0, f"the mirror names a field the header lacks:\n{build.stderr}"
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )[:-1]


def _mirror_layout(mirror=FlashFwdParams) -> list[str]:
    rows = [
        f"{name} {getattr(mirror, name).offset} {ctypes.sizeof(ctype)} {_KIND.get(ctype, 'other')}"
        for name, ctype in mirror._fields_
    ]
    return [*rows, f"sizeof {ctypes.sizeof(mirror)}"]


def test_ctypes_mirror_matches_the_headers_layout(tmp_path):
    assert _header_layout(tmp_path) == _mirror_layout()


def test_the_check_sees_a_retyped_field(tmp_path):
    """The comparison itself: a header whose `scale` became an int32 must not match."""
    header = tmp_path / "flash_api.h"
    header.write_text(HEADER.read_text().replace("float scale;", "int32_t scale;"))
    assert header.read_text() != HEADER.read_text()
    assert _header_layout(tmp_path, header) != _mirror_layout()


def test_fp8_params_mirror_matches_the_headers_layout(tmp_path):
    """FlashFp8Params (the FP8 entry point's): FlashFwdParams whole, then the descales, the
    scratch buffer and the flags, at the offsets the host compiler gives them."""
    assert _header_layout(tmp_path, mirror=FlashFp8Params) == _mirror_layout(FlashFp8Params)


def test_the_fp8_check_sees_a_moved_field(tmp_path):
    header = tmp_path / "flash_api.h"
    text = HEADER.read_text()
    moved = text.replace(
        "    void* v_scratch;\n    int32_t flags;", "    int32_t flags;\n    void* v_scratch;"
    )
    assert moved != text
    header.write_text(moved)
    assert _header_layout(tmp_path, header, FlashFp8Params) != _mirror_layout(FlashFp8Params)

"""The CPU's instruction set, read once at start, and the class of it that the engine's defaults follow.

Pure `classify` (the flags of /proc/cpuinfo -> an `IsaClass`) and `detect` (reads /proc/cpuinfo; no openvino
import). The classes are the steps at which OpenVINO's CPU plugin changes kernels: AVX2 (f32 compute, no bf16),
AVX2 with VNNI (int8 dot products), AVX-512, AVX-512 with VNNI, AVX-512 with BF16 (bf16 inference by default),
AMX (bf16/int8 tiles). tuning.py maps a class to the engine settings measured best for it.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict


class IsaClass(StrEnum):
    AMX = "amx"
    AVX512_BF16 = "avx512-bf16"
    AVX512_VNNI = "avx512-vnni"
    AVX512 = "avx512"
    AVX2_VNNI = "avx2-vnni"
    AVX2 = "avx2"
    BASELINE = "baseline"  # below AVX2: SSE4.2 kernels, or not x86


# /proc/cpuinfo flag -> the name shown in the decision record, in the order shown
FEATURES = {
    "avx2": "AVX2",
    "fma": "FMA",
    "avx_vnni": "AVX-VNNI",
    "avx512f": "AVX-512F",
    "avx512bw": "AVX-512BW",
    "avx512_vnni": "AVX-512-VNNI",
    "avx512_bf16": "AVX-512-BF16",
    "avx512_fp16": "AVX-512-FP16",
    "amx_tile": "AMX",
    "amx_bf16": "AMX-BF16",
    "amx_int8": "AMX-INT8",
    "amx_fp16": "AMX-FP16",
}


class CpuIsa(BaseModel):
    """What the CPU offers: its name, the features that matter to the engine, and their class."""

    model_config = ConfigDict(frozen=True)

    model_name: str = ""
    features: tuple[str, ...] = ()
    level: IsaClass = IsaClass.BASELINE

    def describe(self) -> str:
        return f"{self.level.value} ({' '.join(self.features) or 'no AVX2'})"


def classify(flags: set[str] | frozenset[str]) -> IsaClass:
    """The class of a CPU with these /proc/cpuinfo flags (the highest whose every feature is there)."""
    if "amx_tile" in flags and "amx_bf16" in flags and "avx512_bf16" in flags:
        return IsaClass.AMX
    if "avx512f" in flags and "avx512bw" in flags:
        if "avx512_bf16" in flags and "avx512_vnni" in flags:
            return IsaClass.AVX512_BF16
        if "avx512_vnni" in flags:
            return IsaClass.AVX512_VNNI
        return IsaClass.AVX512
    if "avx2" in flags and "fma" in flags:
        return IsaClass.AVX2_VNNI if "avx_vnni" in flags else IsaClass.AVX2
    return IsaClass.BASELINE


def parse_cpuinfo(text: str) -> CpuIsa:
    """The first processor's model name and flags of a /proc/cpuinfo text."""
    name, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
        if name and flags:
            break
    features = tuple(shown for flag, shown in FEATURES.items() if flag in flags)
    return CpuIsa(model_name=name, features=features, level=classify(flags))


def detect(path: str = "/proc/cpuinfo") -> CpuIsa:
    """This machine's CPU (BASELINE where /proc/cpuinfo cannot be read: not Linux, or a sandbox)."""
    try:
        return parse_cpuinfo(Path(path).read_text(errors="replace"))
    except OSError:
        return CpuIsa()

"""Table tests of the CPU instruction-set classes (ovserve_runtime.isa) and the engine defaults chosen for them
(ovserve_runtime.tuning), as the decision record tells them."""

from __future__ import annotations

import pytest
from ovserve_runtime import decisions as dec
from ovserve_runtime.isa import CpuIsa, IsaClass, classify, detect, parse_cpuinfo
from ovserve_runtime.report import Source, SpeculativeReport, Versions
from ovserve_runtime.tuning import PROFILES, SETTINGS, Choice, choose

VERSIONS = Versions(openvino="2026.4.1", openvinoGenai="2026.4.1.0")

ZEN4 = "fpu sse sse2 ssse3 sse4_1 sse4_2 fma avx f16c avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni"
SAPPHIRE = ZEN4 + " avx512_fp16 amx_bf16 amx_tile amx_int8"


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (SAPPHIRE, IsaClass.AMX),
        (ZEN4, IsaClass.AVX512_BF16),
        ("fma avx2 avx512f avx512bw avx512_vnni", IsaClass.AVX512_VNNI),  # Cascade Lake
        ("fma avx2 avx512f avx512bw", IsaClass.AVX512),  # Skylake-SP
        ("fma avx2 avx512f", IsaClass.AVX2),  # Knights Landing: no BW, the plugin's AVX-512 kernels need it
        ("fma avx2 avx_vnni", IsaClass.AVX2_VNNI),  # Alder Lake
        ("fma avx avx2", IsaClass.AVX2),  # Zen 2/3, Haswell..Coffee Lake
        ("avx avx2", IsaClass.BASELINE),  # no FMA
        ("sse4_2", IsaClass.BASELINE),
        ("", IsaClass.BASELINE),
        ("fma avx2 amx_tile amx_bf16", IsaClass.AVX2),  # AMX without AVX-512-BF16 is not a class
    ],
)
def test_classify(flags: str, level: IsaClass) -> None:
    assert classify(set(flags.split())) is level


def test_parse_cpuinfo_takes_the_first_processor() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654\n"
        f"flags\t\t: {ZEN4}\n\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: sse\n"
    )
    isa = parse_cpuinfo(text)
    assert isa.model_name == "AMD EPYC 9654"
    assert isa.level is IsaClass.AVX512_BF16
    assert isa.features == ("AVX2", "FMA", "AVX-512F", "AVX-512BW", "AVX-512-VNNI", "AVX-512-BF16")
    assert isa.describe() == "avx512-bf16 (AVX2 FMA AVX-512F AVX-512BW AVX-512-VNNI AVX-512-BF16)"


def test_unreadable_cpuinfo_is_baseline(tmp_path) -> None:
    assert detect(str(tmp_path / "missing")) == CpuIsa()
    assert CpuIsa().describe() == "baseline (no AVX2)"


# --- tuning: the row of the CPU's class, where the flags leave a setting AUTO --------------------------------
ROW = {
    IsaClass.AVX512_BF16: {
        "kv_cache_precision": Choice("u8", "1.1x at 16 streams"),
        "dynamic_quantization_group_size": Choice("64", "1.05x at 1 stream"),
    }
}
CPU = CpuIsa(model_name="AMD EPYC", features=("AVX2", "AVX-512-BF16"), level=IsaClass.AVX512_BF16)


@pytest.mark.parametrize(
    ("device", "asked", "chosen"),
    [
        ("CPU", {}, {"kv_cache_precision": "u8", "dynamic_quantization_group_size": 64}),
        ("CPU", {"kv_cache_precision": "AUTO"}, {"kv_cache_precision": "u8", "dynamic_quantization_group_size": 64}),
        ("CPU", {"kv_cache_precision": "f16"}, {"dynamic_quantization_group_size": 64}),  # the spec wins
        ("CPU", {"dynamic_quantization_group_size": 0}, {"kv_cache_precision": "u8"}),  # 0 (off) is asked
        ("GPU", {}, {}),
        ("GPU.1", {}, {}),
    ],
)
def test_choose_fills_only_what_was_left_auto(device: str, asked: dict, chosen: dict) -> None:
    assert choose(CPU, device, asked, ROW).updates() == chosen


def test_a_class_nobody_measured_keeps_the_plugin_defaults() -> None:
    avx2 = CpuIsa(level=IsaClass.AVX2)
    assert choose(avx2, "CPU", {}, ROW).chosen == {}


def test_every_measured_row_names_known_settings_and_valid_values() -> None:
    for level, row in PROFILES.items():
        for setting, c in row.items():
            assert setting in SETTINGS, (level, setting)
            assert c.why, (level, setting)
            if setting == "dynamic_quantization_group_size":
                assert int(c.value) >= 0
            if setting == "kv_cache_precision":
                assert c.value in ("u8", "f16", "bf16", "f32"), "u4 needs a fixed cache size: never a default"


def test_the_record_says_what_was_chosen_for_the_cpu_and_why() -> None:
    tuned = choose(CPU, "CPU", {}, ROW)
    observed = dec.Observed(
        continuous_batching=True,
        inference_precision="bf16",
        kv_cache_precision="u8",
        dynamic_quantization_group_size=64,
        cache_size_gb=0.0,
        cache_bytes=5632,
        block_bytes=5632,
        kv_cache_how="measured",
    )
    asked = dec.Asked(dynamic_quantization_group_size=None)
    d = dec.record(asked, observed, VERSIONS, max_position=None, speculative=SpeculativeReport(), tuning=tuned)
    assert d.kvCachePrecision.value == "u8" and d.kvCachePrecision.source == Source.AUTOMATIC
    assert d.kvCachePrecision.detail == "measured; chosen for avx512-bf16: 1.1x at 16 streams"
    assert (d.dynamicQuantization.value, d.dynamicQuantization.detail) == (
        "64",
        "chosen for avx512-bf16: 1.05x at 1 stream",
    )
    assert d.inferencePrecision.detail == "plugin default on this device"
    assert (d.cpu.value, d.cpu.detail) == ("avx512-bf16", "AMD EPYC: AVX2 AVX-512-BF16")
    # asked explicitly: requested, and nothing says chosen
    d = dec.record(
        dec.Asked(dynamic_quantization_group_size=0),
        observed.__class__(**{**observed.__dict__, "dynamic_quantization_group_size": 0}),
        VERSIONS,
        max_position=None,
        speculative=SpeculativeReport(),
        tuning=choose(CPU, "CPU", {"dynamic_quantization_group_size": 0}, ROW),
    )
    assert (d.dynamicQuantization.value, d.dynamicQuantization.source) == ("0", Source.REQUESTED)

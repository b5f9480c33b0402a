"""Engine defaults that follow the CPU: per instruction-set class (isa.py), the settings measured fastest there.

Pure (no openvino import): the CPU's class and what the flags ask in, the settings to apply and why out. A
setting the flags (the spec) give explicitly always wins; AUTO (unset) leaves it to this table, and where the
table names nothing for a class, to the plugin and openvino-genai. Each row comes from benchmarks/engine_sweep.py
on a CPU of that class (docs/benchmarks.md, "Engine settings per instruction set"); a class nobody measured
keeps the plugin's defaults rather than a guess. GPU devices are not tuned here.

Every choice is recorded: the decision record's detail of the setting says "chosen for <class>: <why>", and
the `cpu` decision names the class and the features it was read from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .isa import CpuIsa, IsaClass


@dataclass(frozen=True)
class Choice:
    value: str
    why: str  # the measurement behind it, short


# setting -> the flag it stands for (RuntimeFlags field)
SETTINGS = ("kv_cache_precision", "inference_precision", "dynamic_quantization_group_size")

# class -> setting -> choice. Only measured rows (benchmarks/engine_sweep.py on bench-qwen, docs/benchmarks.md).
PROFILES: dict[IsaClass, dict[str, Choice]] = {
    IsaClass.AVX512_BF16: {  # AMD EPYC (Zen 4), 2 cores, 2026-12-07; Intel Cooper Lake shares the class
        "dynamic_quantization_group_size": Choice(
            "128",
            "engine_sweep, bench-qwen int8: group 128 against the plugin's 32, x1.10-1.48 tok/s at 16 streams, "
            "x1.19-1.59 at 64, 1 stream within noise; greedy tokens nearer the f32 reference",
        ),
        "inference_precision": Choice(
            "f32",
            "engine_sweep: with group-128 quantization x1.14/1.17/1.19 tok/s at 1/16/64 streams against the "
            "plugin's bf16; greedy tokens nearer the f32 reference",
        ),
        "kv_cache_precision": Choice(
            "u8",
            "engine_sweep: with f32 inference the pipeline would allocate f16; u8 is x1.02/1.09/1.12 tok/s at "
            "1/16/64 streams and half the KV-cache bytes",
        ),
    },
}


@dataclass(frozen=True)
class Tuning:
    """The CPU seen and the settings chosen for it (only those the flags left AUTO)."""

    isa: CpuIsa
    device: str = "CPU"
    chosen: dict[str, Choice] = field(default_factory=dict)

    def why(self, setting: str) -> str | None:
        c = self.chosen.get(setting)
        return f"chosen for {self.isa.level.value}: {c.why}" if c else None

    def updates(self) -> dict[str, str | int]:
        """RuntimeFlags field -> value for the settings chosen here."""
        return {k: int(c.value) if k == "dynamic_quantization_group_size" else c.value for k, c in self.chosen.items()}


def on_cpu(device: str) -> bool:
    """CPU, CPU.0: the devices the rows are for (a GPU is not tuned here)."""
    return device.split(".")[0].upper() == "CPU"


def is_auto(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.upper() == "AUTO")


def choose(
    isa: CpuIsa, device: str, asked: dict[str, object], profiles: dict[IsaClass, dict[str, Choice]] | None = None
) -> Tuning:
    """The settings of `isa`'s row that `asked` (RuntimeFlags field -> value) leaves AUTO; none off the CPU."""
    if not on_cpu(device):
        return Tuning(isa=isa, device=device)
    row = (PROFILES if profiles is None else profiles).get(isa.level, {})
    chosen = {k: c for k, c in row.items() if k in SETTINGS and is_auto(asked.get(k))}
    return Tuning(isa=isa, device=device, chosen=chosen)

"""The model files' mappings the engine gives back after compiling (ovserve_runtime.engine.pages)."""

from __future__ import annotations

from ovserve_runtime.engine.pages import model_mappings

MAPS = """\
7f0000000000-7f0010000000 r--s 00000000 08:01 123 /models/m/openvino_model.bin
7f0010000000-7f0010100000 r--s 00000000 08:01 124 /models/m/openvino_tokenizer.bin
7f0020000000-7f0020100000 rw-p 00000000 08:01 125 /models/m/openvino_model.bin
7f0030000000-7f0030100000 r--p 00000000 08:01 126 /models/other/openvino_model.bin
7f0040000000-7f0040100000 r-xp 00000000 08:01 127 /usr/lib/libopenvino.so
7f0050000000-7f0050100000 r--s 00000000 08:01 128 /models/m/config.json
7f0060000000-7f0060100000 r--p 00000000 08:01 129 /models/draft/openvino_model.bin
7f0070000000-7f0070100000 rw-p 00000000 00:00 0 [heap]
"""


def test_only_read_only_bins_under_the_model_dirs() -> None:
    assert model_mappings(MAPS, ["/models/m"]) == [
        (0x7F0000000000, 0x7F0010000000),
        (0x7F0010000000, 0x7F0010100000),
    ]  # not the writable one, not another model's, not a library or a json
    assert model_mappings(MAPS, ["/models/m/", "/models/draft", ""]) == [
        (0x7F0000000000, 0x7F0010000000),
        (0x7F0010000000, 0x7F0010100000),
        (0x7F0060000000, 0x7F0060100000),
    ]
    assert model_mappings(MAPS, ["/models/m2"]) == []  # a prefix of a name is not its directory

"""Image decoding (ovserve_runtime.images): Pillow for PNG/JPEG/WebP, limits checked from the header first."""

from __future__ import annotations

import struct
import time
import zlib

import numpy as np
import pytest
from ovserve_runtime.images import (
    ImageBudget,
    ImageError,
    ImageLimits,
    data_url,
    decode_data_url,
    decode_image,
    encode,
)

IMG = np.random.RandomState(3).randint(0, 255, (40, 48, 3), dtype=np.uint8)


def png_bomb(w: int, h: int, rows: int | None = None) -> bytes:
    """A PNG of w x h black pixels: compresses ~1000:1, so a few hundred KB inflate to gigabytes.
    `rows` < h writes only that many rows of data (the header still says h)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    z = zlib.compressobj(9)
    row = b"\x00" * (w * 3 + 1)
    idat = b"".join(z.compress(row) for _ in range(h if rows is None else rows)) + z.flush()
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("fmt", "options", "mime", "exact"),
    [
        ("PNG", {}, "image/png", True),
        ("WEBP", {"lossless": True}, "image/webp", True),
        ("WEBP", {"quality": 80}, "image/webp", False),
        ("JPEG", {"quality": 95}, "image/jpeg", False),
    ],
)
def test_formats_decode_to_rgb(fmt, options, mime, exact):
    img = decode_data_url(data_url(encode(IMG, fmt, **options), mime))
    assert (img.shape, img.dtype, img.flags["C_CONTIGUOUS"]) == ((40, 48, 3), np.uint8, True)
    if exact:
        assert np.array_equal(img, IMG)
    else:  # lossy: close on average
        assert np.abs(img.astype(int) - IMG).mean() < 60


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "LA", "I;16", "CMYK"])
def test_other_modes_become_rgb(mode):
    import io

    from PIL import Image

    im = Image.fromarray(IMG).convert(mode)
    out = io.BytesIO()
    im.save(out, format="JPEG" if mode == "CMYK" else "PNG")
    img = decode_image(out.getvalue())
    assert img.shape == (40, 48, 3) and img.dtype == np.uint8


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"", 400, "invalid_image"),
        (b"GIF89a" + b"\x00" * 40, 400, "invalid_image"),  # a real format, not accepted
        (b"BM" + b"\x00" * 60, 400, "invalid_image"),
        (b"\x89PNG\r\n\x1a\n" + b"junk" * 10, 400, "invalid_image"),
        (encode(IMG, "PNG")[:60], 400, "invalid_image"),  # truncated inside IDAT
        (encode(IMG, "JPEG")[:200], 400, "invalid_image"),
        (encode(IMG, "WEBP")[:40], 400, "invalid_image"),
        (png_bomb(5000, 5000), 413, "image_too_large"),  # over our pixel limit, under Pillow's
        (png_bomb(20000, 20000, rows=10), 413, "image_too_large"),  # over Pillow's DecompressionBombError too
    ],
)
def test_refused(raw, status, code):
    t0 = time.monotonic()
    with pytest.raises(ImageError) as ei:
        decode_image(raw)
    assert (ei.value.status, ei.value.code) == (status, code), str(ei.value)
    assert time.monotonic() - t0 < 1  # refused from the header: nothing was inflated


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("https://example.com/cat.png", 400),
        ("data:image/png,rawbytes", 400),
        ("data:image/png;base64,@@@@", 400),
        ("data:image/png;base64,AAAA", 400),
        ("", 400),
    ],
)
def test_bad_data_urls(url, status):
    with pytest.raises(ImageError) as ei:
        decode_data_url(url)
    assert ei.value.status == status


def test_base64_with_line_breaks_is_accepted():
    url = data_url(encode(IMG))
    head, _, payload = url.partition(",")
    wrapped = "\n".join(payload[i : i + 76] for i in range(0, len(payload), 76))
    assert np.array_equal(decode_data_url(head + "," + wrapped), IMG)


def test_budget_counts_decoded_bytes_across_images():
    raw = encode(IMG)
    one = 40 * 48 * 3
    budget = ImageBudget(ImageLimits(max_pixels=40 * 48, max_decoded_bytes=2 * one))
    decode_image(raw, budget)
    decode_image(raw, budget)
    assert budget.decoded_bytes == 2 * one
    with pytest.raises(ImageError) as ei:
        decode_image(raw, budget)  # the third would pass the pixel limit but not the request's budget
    assert (ei.value.status, ei.value.code) == (413, "image_too_large")
    with pytest.raises(ImageError):
        decode_image(raw, ImageBudget(ImageLimits(max_pixels=40 * 48 - 1)))

"""Images from OpenAI `image_url` content parts (data: URLs) as openvino tensors [1, H, W, 3] uint8.

Pillow is used when installed; otherwise a small built-in PNG decoder (8-bit gray/RGB/RGBA/palette,
non-interlaced) keeps the runtime free of extra dependencies.
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
import zlib

import numpy as np


class ImageError(ValueError):
    pass


def decode_data_url(url: str) -> np.ndarray:
    if not url.startswith("data:"):
        raise ImageError("only data: URLs (base64) are supported for image_url; remote URLs are not fetched")
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        raise ImageError("image data URL must be base64 encoded")
    try:
        raw = base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"invalid base64 image data: {exc}") from exc
    return decode_image(raw)


def decode_image(raw: bytes) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        try:
            return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"), dtype=np.uint8)
        except Exception as exc:
            raise ImageError(f"cannot decode image: {exc}") from exc
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise ImageError("cannot decode image: only PNG is supported without Pillow")
    return _decode_png(raw)


def _decode_png(raw: bytes) -> np.ndarray:
    pos, idat, palette = 8, [], None
    width = height = depth = ctype = interlace = 0
    while pos + 8 <= len(raw):
        (length,) = struct.unpack(">I", raw[pos : pos + 4])
        kind = raw[pos + 4 : pos + 8]
        data = raw[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", data)
        elif kind == b"PLTE":
            palette = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(data)
        elif kind == b"IEND":
            break
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace or not width or not height:
        raise ImageError("unsupported PNG (need 8-bit, non-interlaced)")
    try:
        data = zlib.decompress(b"".join(idat))
    except zlib.error as exc:
        raise ImageError(f"corrupt PNG: {exc}") from exc
    stride = width * channels
    if len(data) < height * (stride + 1):
        raise ImageError("corrupt PNG: truncated image data")
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    bpp = channels
    for y in range(height):
        f = data[y * (stride + 1)]
        line = np.frombuffer(data, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 0xFF
        else:
            cur = line.copy()
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                b = prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) >> 1
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                else:
                    raise ImageError(f"corrupt PNG: filter {f}")
                cur[x] = (cur[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    img = out.reshape(height, width, channels)
    if ctype == 3:
        if palette is None:
            raise ImageError("corrupt PNG: palette missing")
        img = palette[img[..., 0]]
    elif channels == 1:
        img = np.repeat(img, 3, axis=2)
    elif channels == 2:
        img = np.repeat(img[..., :1], 3, axis=2)
    elif channels == 4:
        img = img[..., :3]
    return np.ascontiguousarray(img, dtype=np.uint8)


def encode_png(img: np.ndarray) -> bytes:
    """Encode an RGB uint8 array as PNG (used by tests and the benchmark to build image_url parts)."""
    h, w, _ = img.shape
    rows = b"".join(b"\x00" + img[y].astype(np.uint8).tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def to_tensor(img: np.ndarray):
    import openvino as ov

    return ov.Tensor(np.ascontiguousarray(img[None, ...]))

"""Images from OpenAI `image_url` content parts (base64 data: URLs) as openvino tensors [1, H, W, 3] uint8.

Decoding is Pillow's (PNG, JPEG, WebP; nothing else is even tried). A hostile image must cost at most what
the limits allow, so the size is read from the header (`Image.open` is lazy) and checked against the
per-image pixel limit and the request's budget of decoded bytes BEFORE any pixel is decompressed; Pillow's
own decompression-bomb guard stays on behind it. Every failure is an `ImageError` carrying the HTTP status
and OpenAI-style code the server answers with (400 invalid_image, 413 image_too_large).
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image

FORMATS = ("PNG", "JPEG", "WEBP")
# The pixel check below is explicit and stricter; Pillow's warning (before its own error at 2x) is noise.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class ImageError(ValueError):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_image") -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass(frozen=True)
class ImageLimits:
    max_images: int = 16  # image parts per request
    max_pixels: int = 4096 * 4096  # width * height of one image
    max_decoded_bytes: int = 256 * 1024 * 1024  # RGB bytes of all the images of one request


@dataclass
class ImageBudget:
    """What one request may still decode."""

    limits: ImageLimits
    decoded_bytes: int = 0


def decode_data_url(url: str, budget: ImageBudget | None = None) -> np.ndarray:
    return decode_image(data_url_bytes(url), budget)


def data_url_bytes(url: str) -> bytes:
    if not url.startswith("data:"):
        raise ImageError("only data: URLs (base64) are supported for image_url; remote URLs are not fetched")
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        raise ImageError("image data URL must be base64 encoded")
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"invalid base64 image data: {exc}") from exc


def decode_image(raw: bytes, budget: ImageBudget | None = None) -> np.ndarray:
    """RGB uint8 [H, W, 3]; the header is checked against the budget before decoding."""
    budget = budget or ImageBudget(ImageLimits())
    limits = budget.limits
    try:
        im = Image.open(io.BytesIO(raw), formats=FORMATS)  # reads the header only
    except Image.DecompressionBombError as exc:
        raise ImageError(f"image too large: {exc}", 413, "image_too_large") from exc
    except Image.UnidentifiedImageError as exc:
        raise ImageError("not a PNG, JPEG or WebP image") from exc
    except Exception as exc:  # SyntaxError, struct.error, OSError ... from a broken header
        raise ImageError(f"cannot decode image (PNG, JPEG or WebP expected): {exc}") from exc
    with im:
        w, h = im.size
        if w <= 0 or h <= 0:
            raise ImageError(f"image has no pixels ({w}x{h})")
        if w * h > limits.max_pixels:
            raise ImageError(
                f"image of {w}x{h} = {w * h} pixels is over the limit of {limits.max_pixels} pixels",
                413,
                "image_too_large",
            )
        rgb_bytes = w * h * 3
        if budget.decoded_bytes + rgb_bytes > limits.max_decoded_bytes:
            raise ImageError(
                f"the request's images decode to more than {limits.max_decoded_bytes} bytes",
                413,
                "image_too_large",
            )
        budget.decoded_bytes += rgb_bytes
        try:
            img = np.asarray(im.convert("RGB"), dtype=np.uint8)
        except Image.DecompressionBombError as exc:
            raise ImageError(f"image too large: {exc}", 413, "image_too_large") from exc
        except Exception as exc:  # truncated or corrupt data
            raise ImageError(f"cannot decode {im.format} image: {exc}") from exc
    return np.ascontiguousarray(img)


def encode(img: np.ndarray, fmt: str = "PNG", **options) -> bytes:
    """Encode an RGB uint8 array (used by tests and benchmarks to build image_url parts)."""
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img, dtype=np.uint8)).save(out, format=fmt, **options)
    return out.getvalue()


def encode_png(img: np.ndarray) -> bytes:
    return encode(img, "PNG")


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def to_tensor(img: np.ndarray):
    import openvino as ov

    return ov.Tensor(np.ascontiguousarray(img[None, ...]))

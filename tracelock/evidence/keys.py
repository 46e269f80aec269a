"""Ed25519 keys (RFC 8032) for signing checkpoints and bundles.

* :class:`PrivateKey` wraps a 32-byte seed; its ``repr`` never shows it. Key files are PEM
  (PKCS#8, unencrypted) created with mode 0600 from the start (never chmod-ed afterwards) and
  never overwritten; loading refuses a private key file that group or others may read.
* :class:`PublicKey` wraps the 32-byte RFC 8032 encoding and validates it on construction:
  a non-canonical encoding (``y >= p``) raises :class:`KeyNonCanonicalError`, one of the eight
  points of small order (in any encoding, canonical or not) raises :class:`KeySmallOrderError`,
  a string that decodes to no curve point raises :class:`KeyNotOnCurveError`.
* :meth:`PublicKey.verify` returns a bool; :meth:`PublicKey.verify_or_raise` raises
  :class:`SignatureInvalidError`.
* Identifiers: :meth:`PublicKey.fingerprint` (SHA-256 of the raw key, 64 hex digits) and
  :meth:`PublicKey.key_id` (the signed-note key ID, which also binds the key name).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tracelock.errors import EvidenceError

__all__ = [
    "ED25519_SIGNATURE_TYPE",
    "PUBLIC_KEY_SIZE",
    "SEED_SIZE",
    "SIGNATURE_SIZE",
    "KeyExistsError",
    "KeyFileError",
    "KeyInvalidError",
    "KeyNameError",
    "KeyNonCanonicalError",
    "KeyNotOnCurveError",
    "KeyPermissionsError",
    "KeySmallOrderError",
    "PrivateKey",
    "PublicKey",
    "SignatureInvalidError",
    "check_key_name",
    "generate_private_key",
    "is_valid_key_name",
    "key_id",
    "load_private_key",
    "load_public_key",
    "verify",
    "write_private_key",
    "write_public_key",
]

PUBLIC_KEY_SIZE = 32
SEED_SIZE = 32
SIGNATURE_SIZE = 64
#: The signed-note signature type byte of Ed25519 (c2sp.org/signed-note).
ED25519_SIGNATURE_TYPE = 0x01


# --------------------------------------------------------------------------------------------
# Errors


class KeyInvalidError(EvidenceError, ValueError):
    """Key material is malformed: wrong length, unreadable PEM, not an Ed25519 key."""

    code: ClassVar[str] = "EVIDENCE_KEY_INVALID"


class KeyNonCanonicalError(KeyInvalidError):
    """An Ed25519 public key encodes its y coordinate as a value >= p (non-canonical)."""

    code: ClassVar[str] = "EVIDENCE_KEY_NON_CANONICAL"


class KeySmallOrderError(KeyInvalidError):
    """An Ed25519 public key is one of the 8 points of small order (in any encoding)."""

    code: ClassVar[str] = "EVIDENCE_KEY_SMALL_ORDER"


class KeyNotOnCurveError(KeyInvalidError):
    """32 bytes that do not decode to a point of edwards25519."""

    code: ClassVar[str] = "EVIDENCE_KEY_NOT_ON_CURVE"


class KeyNameError(EvidenceError, ValueError):
    """A key name is empty, not UTF-8, or contains a Unicode space or a plus sign."""

    code: ClassVar[str] = "EVIDENCE_KEY_NAME_INVALID"


class KeyFileError(EvidenceError):
    """A key file is missing or cannot be read or written."""

    code: ClassVar[str] = "EVIDENCE_KEY_FILE"


class KeyExistsError(KeyFileError):
    """Refusing to overwrite an existing key file."""

    code: ClassVar[str] = "EVIDENCE_KEY_EXISTS"


class KeyPermissionsError(KeyFileError):
    """A private key file can be read or written by group or others."""

    code: ClassVar[str] = "EVIDENCE_KEY_PERMISSIONS"


class SignatureInvalidError(EvidenceError):
    """An Ed25519 signature does not verify under the given public key."""

    code: ClassVar[str] = "EVIDENCE_SIGNATURE_INVALID"


# --------------------------------------------------------------------------------------------
# edwards25519 point decoding, only to classify public keys (RFC 8032 section 5.1.3)

_P = 2**255 - 19
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _recover_x(y: int, sign: int) -> int | None:
    """The x coordinate of the point with this y (< p) and sign bit, or None if there is none.
    A zero x is returned whatever the sign bit."""
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = (u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P)) % _P
    vx2 = (v * x * x) % _P
    if vx2 == u:
        pass
    elif vx2 == (-u) % _P:
        x = (x * _SQRT_M1) % _P
    else:
        return None
    if x != 0 and x & 1 != sign:
        x = _P - x
    return x


def _double(x: int, y: int) -> tuple[int, int]:
    """Affine doubling on -x^2 + y^2 = 1 + d x^2 y^2 (complete: no exceptional points)."""
    xy = x * y % _P
    xx = x * x % _P
    yy = y * y % _P
    dxxyy = _D * xx * yy % _P
    x3 = 2 * xy * pow(1 + dxxyy, _P - 2, _P) % _P
    y3 = (yy + xx) * pow(1 - dxxyy, _P - 2, _P) % _P
    return x3, y3


def _classify(raw: bytes) -> type[KeyInvalidError] | None:
    """None for a usable public key encoding, else the error class that rejects it."""
    value = int.from_bytes(raw, "little")
    sign = value >> 255
    y_encoded = value & ((1 << 255) - 1)
    point = _recover_x(y_encoded % _P, sign)
    if point is not None:
        x, y = point, y_encoded % _P
        for _ in range(3):
            x, y = _double(x, y)
        if (x, y) == (0, 1):  # [8]P is the neutral element: P is in the torsion subgroup
            return KeySmallOrderError
    if y_encoded >= _P:
        return KeyNonCanonicalError
    if point is None:
        return KeyNotOnCurveError
    return None


# --------------------------------------------------------------------------------------------
# Key names and identifiers

# The Unicode White_Space property, which is what "Unicode spaces" means in the note spec.
_UNICODE_SPACES = frozenset(
    [chr(c) for c in range(0x09, 0x0E)]
    + [" ", "\x85", "\xa0", "\u1680"]
    + [chr(c) for c in range(0x2000, 0x200B)]
    + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
)


def is_valid_key_name(name: str) -> bool:
    """A signed-note key name: non-empty UTF-8 without Unicode spaces, ``+`` or controls."""
    if not isinstance(name, str) or not name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(c in _UNICODE_SPACES or c == "+" or ord(c) < 0x20 or c == "\x7f" for c in name)


def check_key_name(name: str) -> str:
    """Return ``name`` if it is a valid key name, else raise :class:`KeyNameError`."""
    if not is_valid_key_name(name):
        raise KeyNameError(
            f"invalid key name {name!r}: it must be non-empty and contain no space, '+' or "
            "control character",
            details={"name": repr(name)},
        )
    return name


def key_id(name: str, public_key: PublicKey) -> int:
    """The signed-note key ID: ``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` as a
    big-endian uint32."""
    check_key_name(name)
    digest = hashlib.sha256(
        name.encode("utf-8") + b"\n" + bytes([ED25519_SIGNATURE_TYPE]) + public_key.raw
    ).digest()
    return int.from_bytes(digest[:4], "big")


# --------------------------------------------------------------------------------------------
# Keys


class PublicKey:
    """A validated Ed25519 public key (the 32-byte RFC 8032 encoding)."""

    __slots__ = ("_key", "_raw")

    def __init__(self, raw: bytes) -> None:
        if not isinstance(raw, bytes | bytearray) or len(raw) != PUBLIC_KEY_SIZE:
            length = len(raw) if isinstance(raw, bytes | bytearray) else None
            raise KeyInvalidError(
                f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, got "
                + (f"{length}" if length is not None else type(raw).__name__),
                details={"length": length},
            )
        raw = bytes(raw)
        problem = _classify(raw)
        if problem is KeySmallOrderError:
            raise KeySmallOrderError(
                f"public key {raw.hex()} is a point of small order; it would accept forged "
                "signatures",
                details={"key": raw.hex()},
            )
        if problem is KeyNonCanonicalError:
            raise KeyNonCanonicalError(
                f"public key {raw.hex()} is not canonically encoded (y >= 2^255 - 19)",
                details={"key": raw.hex()},
            )
        if problem is not None:
            raise KeyNotOnCurveError(
                f"public key {raw.hex()} is not a point of edwards25519",
                details={"key": raw.hex()},
            )
        self._raw = raw
        try:
            self._key = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError as exc:  # pragma: no cover - every such input is classified above
            raise KeyNotOnCurveError(f"public key {raw.hex()} is rejected: {exc}") from exc

    @classmethod
    def from_bytes(cls, raw: bytes) -> PublicKey:
        return cls(raw)

    @classmethod
    def from_hex(cls, text: str) -> PublicKey:
        try:
            raw = bytes.fromhex(text.strip())
        except ValueError as exc:
            raise KeyInvalidError("a hex public key must be 64 hexadecimal digits") from exc
        return cls(raw)

    @classmethod
    def from_pem(cls, data: bytes) -> PublicKey:
        """Read a PEM ``PUBLIC KEY`` (SubjectPublicKeyInfo) holding an Ed25519 key."""
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise KeyInvalidError("not a PEM public key") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise KeyInvalidError(f"the PEM public key is not Ed25519 ({type(key).__name__})")
        return cls(key.public_bytes_raw())

    @property
    def raw(self) -> bytes:
        """The 32-byte RFC 8032 encoding."""
        return self._raw

    def hex(self) -> str:
        return self._raw.hex()

    def fingerprint(self) -> str:
        """SHA-256 of the 32-byte key, as 64 lowercase hex digits."""
        return hashlib.sha256(self._raw).hexdigest()

    def key_id(self, name: str) -> int:
        """The signed-note key ID of this key under ``name`` (see :func:`key_id`)."""
        return key_id(name, self)

    def to_pem(self) -> bytes:
        return self._key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when ``signature`` is a valid RFC 8032 Ed25519 signature of ``message``."""
        if not isinstance(signature, bytes | bytearray) or len(signature) != SIGNATURE_SIZE:
            return False
        try:
            self._key.verify(bytes(signature), bytes(message))
        except InvalidSignature:
            return False
        return True

    def verify_or_raise(self, message: bytes, signature: bytes) -> None:
        """Like :meth:`verify`, raising :class:`SignatureInvalidError` instead of returning False."""
        if not self.verify(message, signature):
            raise SignatureInvalidError(
                f"signature does not verify under public key {self.fingerprint()[:16]}",
                details={"fingerprint": self.fingerprint()},
            )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"PublicKey({self._raw.hex()})"


class PrivateKey:
    """An Ed25519 private key. Its ``repr`` and ``str`` never show the secret."""

    __slots__ = ("_key", "_public")

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self._public = PublicKey(key.public_key().public_bytes_raw())

    @classmethod
    def generate(cls, entropy: Callable[[int], bytes] | None = None) -> PrivateKey:
        """A fresh key whose seed is ``entropy(32)``; by default the operating system's
        random source (``os.urandom``), the one place keys read the outside world."""
        source = os.urandom if entropy is None else entropy
        return cls.from_seed(source(SEED_SIZE))

    @classmethod
    def from_seed(cls, seed: bytes) -> PrivateKey:
        """The key of a 32-byte RFC 8032 secret (seed)."""
        if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_SIZE:
            raise KeyInvalidError(f"an Ed25519 seed is {SEED_SIZE} bytes")
        return cls(Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @classmethod
    def from_pem(cls, data: bytes) -> PrivateKey:
        """Read an unencrypted PEM ``PRIVATE KEY`` (PKCS#8) holding an Ed25519 key."""
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise KeyInvalidError("not an unencrypted PEM private key") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyInvalidError(f"the PEM private key is not Ed25519 ({type(key).__name__})")
        return cls(key)

    @property
    def public_key(self) -> PublicKey:
        return self._public

    def sign(self, message: bytes) -> bytes:
        """The 64-byte RFC 8032 Ed25519 signature of ``message`` (deterministic)."""
        return self._key.sign(bytes(message))

    def seed_bytes(self) -> bytes:
        """The 32-byte secret. Handle with care: never log or print it."""
        return self._key.private_bytes_raw()

    def to_pem(self) -> bytes:
        """The unencrypted PKCS#8 PEM encoding (what :func:`write_private_key` stores)."""
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def __repr__(self) -> str:
        return f"PrivateKey(<secret>, public={self._public.hex()})"

    __str__ = __repr__

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("private keys are not picklable")


def generate_private_key(entropy: Callable[[int], bytes] | None = None) -> PrivateKey:
    """A fresh Ed25519 key (see :meth:`PrivateKey.generate`)."""
    return PrivateKey.generate(entropy)


# --------------------------------------------------------------------------------------------
# Key files


def write_private_key(path: Path, key: PrivateKey) -> None:
    """Create ``path`` with mode 0600 and write the PEM private key; never overwrites."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        raise KeyExistsError(
            f"{path} already exists; refusing to overwrite a key", details={"path": str(path)}
        ) from None
    except OSError as exc:
        raise KeyFileError(
            f"cannot create {path}: {exc.strerror}", details={"path": str(path)}
        ) from exc
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(key.to_pem())
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise KeyFileError(
            f"cannot write {path}: {exc.strerror}", details={"path": str(path)}
        ) from exc


def load_private_key(path: Path, *, check_permissions: bool = True) -> PrivateKey:
    """Read a private key written by :func:`write_private_key`.

    With ``check_permissions`` (the default, POSIX only) a file that group or others can access
    raises :class:`KeyPermissionsError`.
    """
    path = Path(path)
    try:
        with open(path, "rb") as src:
            if check_permissions and os.name == "posix":
                mode = os.fstat(src.fileno()).st_mode
                if stat.S_IMODE(mode) & 0o077:
                    raise KeyPermissionsError(
                        f"private key {path} has mode {stat.S_IMODE(mode):04o}; it must not be "
                        "accessible to group or others (expected 0600)",
                        details={"path": str(path), "mode": f"{stat.S_IMODE(mode):04o}"},
                    )
            data = src.read()
    except OSError as exc:
        raise KeyFileError(
            f"cannot read private key {path}: {exc.strerror}", details={"path": str(path)}
        ) from exc
    return PrivateKey.from_pem(data)


def write_public_key(path: Path, key: PublicKey) -> None:
    """Create ``path`` (mode 0644) with the PEM public key; never overwrites."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise KeyExistsError(
            f"{path} already exists; refusing to overwrite a key", details={"path": str(path)}
        ) from None
    except OSError as exc:
        raise KeyFileError(
            f"cannot create {path}: {exc.strerror}", details={"path": str(path)}
        ) from exc
    with os.fdopen(fd, "wb") as out:
        out.write(key.to_pem())


def load_public_key(path: Path) -> PublicKey:
    """Read a public key file: PEM, or the 64 hex digits of the raw key."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(
            f"cannot read public key {path}: {exc.strerror}", details={"path": str(path)}
        ) from exc
    if data.lstrip().startswith(b"-----BEGIN"):
        return PublicKey.from_pem(data)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise KeyInvalidError(f"{path} is neither a PEM nor a hex public key") from None
    return PublicKey.from_hex(text)


def verify(public_key: PublicKey | bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` verifies; a raw key is validated first (and may raise
    a :class:`KeyInvalidError`)."""
    key = public_key if isinstance(public_key, PublicKey) else PublicKey(public_key)
    return key.verify(message, signature)

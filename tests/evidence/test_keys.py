"""Ed25519 keys: RFC 8032 test vectors, Wycheproof, rejection of small-order and
non-canonical public keys, and key files."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
from pathlib import Path

import pytest

from tracelock.evidence import keys as K

# RFC 8032 section 7.1, TEST 1 to TEST 3: (secret key, public key, message, signature).
RFC8032_VECTORS = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032_VECTORS)
def test_rfc8032_vectors(secret: str, public: str, message: str, signature: str) -> None:
    key = K.PrivateKey.from_seed(bytes.fromhex(secret))
    assert key.public_key.hex() == public
    assert key.sign(bytes.fromhex(message)).hex() == signature
    pub = K.PublicKey(bytes.fromhex(public))
    assert pub.verify(bytes.fromhex(message), bytes.fromhex(signature))
    assert K.verify(bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature))
    pub.verify_or_raise(bytes.fromhex(message), bytes.fromhex(signature))
    tampered = bytes.fromhex(message) + b"!"
    assert not pub.verify(tampered, bytes.fromhex(signature))
    with pytest.raises(K.SignatureInvalidError) as exc:
        pub.verify_or_raise(tampered, bytes.fromhex(signature))
    assert exc.value.code == "EVIDENCE_SIGNATURE_INVALID"
    assert not pub.verify(bytes.fromhex(message), bytes.fromhex(signature)[:63])
    assert key.seed_bytes().hex() == secret


def test_wycheproof(vectors_dir: Path) -> None:
    suite = json.loads((vectors_dir / "ed25519" / "wycheproof_ed25519_test.json").read_text("utf-8"))
    total = 0
    wrong = []
    for group in suite["testGroups"]:
        try:
            pub: K.PublicKey | None = K.PublicKey(bytes.fromhex(group["publicKey"]["pk"]))
        except K.KeyInvalidError:
            pub = None
        for case in group["tests"]:
            total += 1
            accepted = pub is not None and pub.verify(
                bytes.fromhex(case["msg"]), bytes.fromhex(case["sig"])
            )
            if accepted != (case["result"] == "valid"):
                wrong.append((case["tcId"], case["comment"], case["result"]))
    assert total == suite["numberOfTests"] and total > 100
    assert not wrong, wrong


# -- public key validation -----------------------------------------------------------------
# The curve arithmetic below is derived independently of the module, to enumerate the eight
# points of small order: 2P = (+-sqrt(-1), 0) for the order-8 points, so x^2 = -y^2 and
# d y^4 + 2 y^2 - 1 = 0.

P = 2**255 - 19
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def sqrt(a: int) -> int | None:
    a %= P
    r = pow(a, (P + 3) // 8, P)
    if r * r % P != a:
        r = r * SQRT_M1 % P
    return r if r * r % P == a else None


def on_curve(x: int, y: int) -> bool:
    return (-x * x + y * y - 1 - D * x * x * y * y) % P == 0


def encode(x: int, y: int) -> bytes:
    return (y | (x & 1) << 255).to_bytes(32, "little")


def small_order_points() -> list[tuple[int, int]]:
    points = {(0, 1), (0, P - 1), (SQRT_M1, 0), (P - SQRT_M1, 0)}
    s = sqrt(1 + D)
    assert s is not None
    for root in (s, P - s):
        y2 = (-1 + root) * pow(D, P - 2, P) % P
        y = sqrt(y2)
        if y is None:
            continue
        for yy in (y, P - y):
            for xx in (SQRT_M1 * yy % P, P - SQRT_M1 * yy % P):
                points.add((xx, yy))
    assert all(on_curve(x, y) for x, y in points)
    return sorted(points)


def test_small_order_keys_are_rejected_in_every_encoding() -> None:
    points = small_order_points()
    assert len(points) == 8
    encodings = set()
    for x, y in points:
        encodings.add(encode(x, y))
        if x == 0:  # "negative zero": the sign bit set although x = 0
            encodings.add(((1 << 255) | y).to_bytes(32, "little"))
        if y + P < 2**255:  # non-canonical y + p
            for sign in (0, 1):
                encodings.add(((sign << 255) | (y + P)).to_bytes(32, "little"))
    assert len(encodings) == 8 + 2 + 4
    for raw in encodings:
        with pytest.raises(K.KeySmallOrderError) as exc:
            K.PublicKey(raw)
        assert exc.value.code == "EVIDENCE_KEY_SMALL_ORDER"
        assert isinstance(exc.value, K.KeyInvalidError)


def test_non_canonical_keys_are_rejected() -> None:
    found = 0
    for y in range(2, 19):  # y + p < 2**255 only for y < 19
        x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
        if sqrt(x2) is None:
            continue
        found += 1
        with pytest.raises(K.KeyNonCanonicalError) as exc:
            K.PublicKey((y + P).to_bytes(32, "little"))
        assert exc.value.code == "EVIDENCE_KEY_NON_CANONICAL"
        K.PublicKey(y.to_bytes(32, "little"))  # the canonical form of the same point is fine
    assert found >= 1


def test_points_off_the_curve_are_rejected() -> None:
    y = next(
        y for y in range(2, 100) if sqrt((y * y - 1) * pow(D * y * y + 1, P - 2, P)) is None
    )
    with pytest.raises(K.KeyNotOnCurveError) as exc:
        K.PublicKey(y.to_bytes(32, "little"))
    assert exc.value.code == "EVIDENCE_KEY_NOT_ON_CURVE"


def test_wrong_lengths_and_formats() -> None:
    for raw in (b"", b"\x01" * 31, b"\x01" * 33):
        with pytest.raises(K.KeyInvalidError) as exc:
            K.PublicKey(raw)
        assert exc.value.code == "EVIDENCE_KEY_INVALID"
    with pytest.raises(K.KeyInvalidError):
        K.PublicKey.from_hex("zz")
    with pytest.raises(K.KeyInvalidError):
        K.PublicKey.from_pem(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(K.KeyInvalidError):
        K.PrivateKey.from_seed(b"\x00" * 31)
    with pytest.raises(K.KeyInvalidError):
        K.PrivateKey.from_pem(b"not a key")


def test_identifiers() -> None:
    key = K.PrivateKey.from_seed(bytes.fromhex(RFC8032_VECTORS[0][0])).public_key
    assert key.fingerprint() == hashlib.sha256(key.raw).hexdigest()
    assert key.key_id("a") != key.key_id("b")
    assert K.key_id("a", key) == key.key_id("a")
    for bad in ("", "a b", "a+b", "a\u00a0b", "a\u3000b", "a\nb", "a\tb", "\ud800"):
        assert not K.is_valid_key_name(bad)
        with pytest.raises(K.KeyNameError):
            key.key_id(bad)
    for good in ("example.com/log", "é/ü", "a-b_c.d:e@f"):
        assert K.is_valid_key_name(good)


def test_private_key_is_never_shown() -> None:
    key = K.PrivateKey.from_seed(bytes.fromhex(RFC8032_VECTORS[0][0]))
    for text in (repr(key), str(key), f"{key}"):
        assert RFC8032_VECTORS[0][0] not in text
        assert key.public_key.hex() in text
    with pytest.raises(TypeError):
        pickle.dumps(key)


# -- key files -----------------------------------------------------------------------------


def test_private_key_file_is_created_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_chmod(*args: object, **kwargs: object) -> None:
        raise AssertionError("the mode must be set at creation, never changed afterwards")

    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(os, "fchmod", no_chmod)
    old_umask = os.umask(0)  # even with a permissive umask
    try:
        key = K.PrivateKey.generate()
        path = tmp_path / "signing.key"
        K.write_private_key(path, key)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in path.read_bytes()
    loaded = K.load_private_key(path)
    assert loaded.public_key == key.public_key
    assert loaded.sign(b"m") == key.sign(b"m")
    with pytest.raises(K.KeyExistsError) as exc:
        K.write_private_key(path, K.PrivateKey.generate())
    assert exc.value.code == "EVIDENCE_KEY_EXISTS"
    assert K.load_private_key(path).public_key == key.public_key  # untouched


def test_loose_private_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loose.key"
    path.write_bytes(K.PrivateKey.generate().to_pem())
    os.chmod(path, 0o644)
    with pytest.raises(K.KeyPermissionsError) as exc:
        K.load_private_key(path)
    assert exc.value.code == "EVIDENCE_KEY_PERMISSIONS"
    K.load_private_key(path, check_permissions=False)
    with pytest.raises(K.KeyFileError):
        K.load_private_key(tmp_path / "missing.key")


def test_public_key_files(tmp_path: Path) -> None:
    key = K.PrivateKey.generate().public_key
    K.write_public_key(tmp_path / "k.pub", key)
    assert K.load_public_key(tmp_path / "k.pub") == key
    (tmp_path / "k.hex").write_text(key.hex() + "\n")
    assert K.load_public_key(tmp_path / "k.hex") == key
    with pytest.raises(K.KeyExistsError):
        K.write_public_key(tmp_path / "k.pub", key)
    (tmp_path / "bad.pub").write_bytes(b"\xff\xfe")
    with pytest.raises(K.KeyInvalidError):
        K.load_public_key(tmp_path / "bad.pub")


def test_generation_takes_injected_entropy() -> None:
    key = K.generate_private_key(lambda n: bytes.fromhex(RFC8032_VECTORS[1][0])[:n])
    assert key.public_key.hex() == RFC8032_VECTORS[1][1]
    assert K.PrivateKey.generate().public_key != K.PrivateKey.generate().public_key

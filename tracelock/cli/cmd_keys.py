"""Ed25519 signing keys: ``keys generate``, ``keys show``.

``keys generate --name NAME`` writes three files (the file stem is NAME with every character
outside ``A-Z a-z 0-9 . _ -`` replaced by ``_``):

* ``<stem>.key``  the private key, PKCS#8 PEM, created with mode 0600 (never printed);
* ``<stem>.pub``  the public key, PEM;
* ``<stem>.vkey`` the verifier key string ``NAME+<key ID>+<base64 key>`` that verifiers pin.

NAME is the key name of the signed notes, so it is also the origin (the log's name) of the
checkpoints signed with the key unless ``checkpoint --origin`` says otherwise.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import click

from tracelock.cli.common import emit, json_option, reports_errors
from tracelock.errors import UsageError
from tracelock.evidence.history import DEFAULT_KEY_NAME, load_signing_key
from tracelock.evidence.keys import (
    KeyExistsError,
    KeyFileError,
    KeyInvalidError,
    PrivateKey,
    PublicKey,
    check_key_name,
    load_public_key,
    write_private_key,
    write_public_key,
)
from tracelock.evidence.note import NoteVerifier

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def key_file_stem(name: str) -> str:
    stem = _UNSAFE.sub("_", name).lstrip(".")
    return stem or "key"


def describe_key(public: PublicKey, name: str) -> dict[str, Any]:
    verifier = NoteVerifier(name, public)
    return {
        "name": name,
        "public_key": public.hex(),
        "fingerprint": public.fingerprint(),
        "key_id": f"{verifier.key_id:08x}",
        "vkey": verifier.vkey,
    }


def _key_text(info: dict[str, Any]) -> list[str]:
    return [
        f"  name         {info['name']}",
        f"  public key   {info['public_key']}",
        f"  fingerprint  {info['fingerprint']}",
        f"  key ID       {info['key_id']}",
        f"  verifier key {info['vkey']}",
    ]


@click.group("keys")
def keys_group() -> None:
    """Generate and inspect Ed25519 signing keys (for checkpoints)."""


@keys_group.command("generate")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    show_default=True,
    help="Directory to write the key files to (created 0700 if missing).",
)
@click.option(
    "--name",
    default=DEFAULT_KEY_NAME,
    show_default=True,
    help="Key name: the origin of the checkpoints it signs (no spaces or '+').",
)
@json_option
@reports_errors
def generate_command(out_dir: Path, name: str, as_json: bool) -> None:
    """Generate an Ed25519 key pair. The private key is written 0600 and never printed."""
    check_key_name(name)
    stem = key_file_stem(name)
    private_path = out_dir / f"{stem}.key"
    public_path = out_dir / f"{stem}.pub"
    vkey_path = out_dir / f"{stem}.vkey"
    for path in (private_path, public_path, vkey_path):
        if path.exists() or path.is_symlink():
            raise KeyExistsError(
                f"{path} already exists; refusing to overwrite a key", details={"path": str(path)}
            )
    try:
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyFileError(f"cannot create {out_dir}: {exc.strerror}") from None
    key = PrivateKey.generate()
    write_private_key(private_path, key)
    write_public_key(public_path, key.public_key)
    info = describe_key(key.public_key, name)
    fd = os.open(vkey_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(info["vkey"] + "\n")
    document = {
        "ok": True,
        "key": info,
        "files": {
            "private_key": str(private_path),
            "public_key": str(public_path),
            "verifier_key": str(vkey_path),
        },
    }

    def text() -> str:
        return "\n".join(
            [f"generated Ed25519 key {name!r}"]
            + _key_text(info)
            + [
                f"  private key  {private_path} (mode 0600; keep it secret, back it up)",
                f"  public key   {public_path}",
                f"  pin this     {vkey_path} (give it to verifiers: tracelock verify BUNDLE --key {vkey_path})",
            ]
        )

    emit(as_json, document, text)


def _read_any_key(path: Path, name: str | None) -> tuple[PublicKey, str, str]:
    """(public key, key name, kind of file) from a private, public or verifier key file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(f"no key file at {path}", details={"path": str(path)}) from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {path}: {exc.strerror}") from None
    if b"PRIVATE KEY" in data:
        signing = load_signing_key(path)
        return signing.private_key.public_key, name or signing.name or DEFAULT_KEY_NAME, "private"
    if data.lstrip().startswith(b"-----BEGIN") or "+" not in data.decode("ascii", "replace"):
        public = load_public_key(path)
        sibling = path.with_suffix(".vkey")
        found = None
        if sibling.is_file() and sibling != path:
            try:
                verifier = NoteVerifier.from_vkey(sibling.read_text("utf-8").strip())
            except (OSError, UnicodeDecodeError, KeyInvalidError):
                verifier = None
            if verifier is not None and verifier.public_key == public:
                found = verifier.name
        return public, name or found or DEFAULT_KEY_NAME, "public"
    try:
        verifier = NoteVerifier.from_vkey(data.decode("ascii").strip())
    except UnicodeDecodeError:
        raise KeyInvalidError(f"{path} is not a key file") from None
    return verifier.public_key, name or verifier.name, "verifier"


@keys_group.command("show")
@click.argument("path", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--name", default=None, help="Key name to compute the key ID under (default: the key's own).")
@json_option
@reports_errors
def show_command(path: Path | None, name: str | None, as_json: bool) -> None:
    """Show a key's public key, fingerprint, key ID and verifier key string.

    PATH is a private key (.key), public key (.pub, PEM or hex) or verifier key (.vkey) file;
    default $TRACELOCK_KEY, else ./tracelock.key. The private key itself is never shown."""
    if path is None:
        env = os.environ.get("TRACELOCK_KEY")
        path = Path(env) if env else Path(f"{DEFAULT_KEY_NAME}.key")
    if name is not None:
        check_key_name(name)
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a key file")
    public, key_name, kind = _read_any_key(path, name)
    info = describe_key(public, key_name)
    document = {"ok": True, "key": info, "file": str(path), "file_kind": kind}
    emit(as_json, document, lambda: "\n".join([f"{kind} key file {path}"] + _key_text(info)))


COMMANDS = [keys_group]

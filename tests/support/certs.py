"""A throwaway PKI for the TLS tests, made with the openssl command line.

Python's ``cryptography`` package is not a dependency of casque, and openssl ships with every
Debian, so the tests shell out to it. Keys are P-256 (generated in milliseconds, accepted by both
Java 17 and Python's ssl). The server's key and chain also go into a PKCS12 keystore, the format
Cassandra 5.0 reads with ``store_type: PKCS12``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_DAYS = "2"  # long enough for any test run, short enough that a leaked file is useless soon


@dataclass(frozen=True)
class CA:
    """A self-signed certificate authority: its certificate (PEM) and private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Leaf:
    """A certificate signed by a CA, its key, and (for a server) a PKCS12 keystore."""

    cert: Path
    key: Path
    keystore: Path | None = None


def _openssl(*args: str | Path) -> None:
    """Run openssl; on failure raise with its stderr, which says what was wrong."""
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_ca(directory: Path, name: str) -> CA:
    """A CA that may sign certificates (basicConstraints CA:TRUE, keyCertSign)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CA(directory / f"{name}.pem", directory / f"{name}.key")
    _openssl(
        "req",
        "-x509",
        *_KEY,
        "-keyout",
        ca.key,
        "-out",
        ca.cert,
        "-days",
        _DAYS,
        "-subj",
        f"/CN={name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    return ca


def _sign(ca: CA, directory: Path, name: str, extensions: str) -> Leaf:
    csr, ext = directory / f"{name}.csr", directory / f"{name}.ext"
    leaf = Leaf(directory / f"{name}.pem", directory / f"{name}.key")
    ext.write_text(extensions)
    _openssl("req", "-new", *_KEY, "-keyout", leaf.key, "-out", csr, "-subj", f"/CN={name}")
    _openssl(
        "x509",
        "-req",
        "-in",
        csr,
        "-CA",
        ca.cert,
        "-CAkey",
        ca.key,
        "-CAcreateserial",
        "-out",
        leaf.cert,
        "-days",
        _DAYS,
        "-extfile",
        ext,
    )
    return leaf


def make_server(ca: CA, directory: Path, name: str, store_password: str) -> Leaf:
    """A server certificate for 127.0.0.1/localhost, plus a PKCS12 keystore holding it."""
    leaf = _sign(
        ca,
        directory,
        name,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n",
    )
    keystore = directory / f"{name}.p12"
    _openssl(
        "pkcs12",
        "-export",
        "-in",
        leaf.cert,
        "-inkey",
        leaf.key,
        "-certfile",
        ca.cert,
        "-name",
        name,
        "-out",
        keystore,
        "-passout",
        f"pass:{store_password}",
    )
    return Leaf(leaf.cert, leaf.key, keystore)

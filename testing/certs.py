"""Test certificates made with the ``openssl`` command (the venv has no ``cryptography``)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


class PKI:
    """A CA in ``folder`` and the leaf certificates it signs."""

    def __init__(self, folder: Path, name: str = "ca") -> None:
        self.folder = folder
        self.ca = folder / f"{name}.crt"
        self.ca_key = folder / f"{name}.key"
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(self.ca_key), "-out", str(self.ca), "-days", "1",
            "-subj", f"/CN={name}",
        )  # fmt: skip

    def leaf(
        self, name: str, serial: int, san: str = "IP:127.0.0.1,DNS:localhost"
    ) -> tuple[Path, Path]:
        """A certificate (``serial``, ``san``) and its key, signed by the CA."""
        key, csr = self.folder / f"{name}.key", self.folder / f"{name}.csr"
        cert, ext = self.folder / f"{name}.crt", self.folder / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
            "-set_serial", str(serial), "-days", "1", "-out", str(cert), "-extfile", str(ext),
        )  # fmt: skip
        return cert, key

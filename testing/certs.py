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

    def expired_leaf(self, name: str, serial: int, san: str = "DNS:localhost") -> tuple[Path, Path]:
        """A certificate signed by the CA that was valid for one day in 2020 only.

        ``openssl x509`` cannot date a certificate in the past, so ``openssl ca``
        signs it, with the least configuration it needs.
        """
        key, csr = self.folder / f"{name}.key", self.folder / f"{name}.csr"
        cert, conf = self.folder / f"{name}.crt", self.folder / f"{name}.cnf"
        db, serial_file = self.folder / f"{name}.index", self.folder / f"{name}.serial"
        db.write_text("")
        serial_file.write_text(f"{serial:02x}\n")
        conf.write_text(
            "[ca]\ndefault_ca = ca\n[ca]\n"
            f"database = {db}\nserial = {serial_file}\nnew_certs_dir = {self.folder}\n"
            "default_md = sha256\npolicy = any\ncopy_extensions = none\n"
            "unique_subject = no\nx509_extensions = leaf\n"
            "[any]\ncommonName = supplied\n"
            f"[leaf]\nsubjectAltName = {san}\nbasicConstraints = CA:FALSE\n"
        )
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
        )  # fmt: skip
        _openssl(
            "ca", "-batch", "-config", str(conf), "-in", str(csr), "-out", str(cert),
            "-cert", str(self.ca), "-keyfile", str(self.ca_key), "-notext",
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
        )  # fmt: skip
        return cert, key

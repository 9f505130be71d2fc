"""loom.TLS: the client's side of loomd's mutual TLS, the files loomctl's --tls-ca, --tls-cert
and --tls-key name (scripts/make-certs makes them).

    client = loom.Client("10.0.0.1:7070", tls=loom.TLS("certs/ca.pem", "certs/alice.pem",
                                                       "certs/alice.key"))
"""

import dataclasses
import os
from typing import Optional

import grpc


@dataclasses.dataclass
class TLS:
    ca: str     # PEM certificate of the authority that signs the daemons' certificates
    cert: str   # this client's PEM certificate (chain), signed by it
    key: str    # its PEM private key
    # The name to check the daemon's certificate against, when it is not the host dialled.
    server_name: Optional[str] = None

    def _read(self, flag, path):
        try:
            with open(os.fspath(path), "rb") as file:
                return file.read()
        except OSError as error:
            raise ValueError(f"TLS {flag} file '{path}': {error.strerror}") from None

    def channel_credentials(self):
        return grpc.ssl_channel_credentials(root_certificates=self._read("ca", self.ca),
                                            private_key=self._read("key", self.key),
                                            certificate_chain=self._read("cert", self.cert))

    def channel_options(self):
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

"""How a node reaches the graph's etcd and NATS, and how it proves who it is over TLS.

What Dynamo 1.6's clients support (read from its runtime, and tried here):
- etcd: a user and password (ETCD_AUTH_USERNAME, ETCD_AUTH_PASSWORD) or mutual TLS (ETCD_AUTH_CA,
  ETCD_AUTH_CLIENT_CERT, ETCD_AUTH_CLIENT_KEY), never both: with a password set, TLS is not
  configured and the password would cross the network in clear.
- NATS: a user and password, a token, an nkey or a credentials file (NATS_AUTH_*), and TLS with a
  client certificate (NATS_TLS_CA_CERT_PATH, NATS_TLS_CLIENT_CERT_PATH, NATS_TLS_CLIENT_KEY_PATH).
- Its own TCP request plane and response streams, which also cross nodes: mutual TLS
  (DYN_TCP_TLS_CERT_PATH and _KEY_PATH served, DYN_TCP_TLS_CLIENT_CA_CERT_PATH required of callers,
  DYN_TCP_TLS_CA_CERT_PATH trusted, DYN_TCP_TLS_CLIENT_CERT_PATH and _KEY_PATH presented).

Mutual TLS is what all three support that encrypts and authenticates at once, so that is what a
graph's `infrastructure.tls` configures: one certificate authority, and a certificate and key per
node. Servers accept only clients the authority signed, and clients only servers it signed. What
stays outside: NIXL's KV transfers (Dynamo says to keep that fabric on the trusted network) and
plain-HTTP metrics (workers' system ports, NATS's monitoring port).

ETCD_AUTH_* hold the PEM text itself, not a path: Dynamo's docs say paths, but a path never
connects (its runtime hands the value to `Certificate::from_pem`). So those three variables are read
from the files as each process starts (`ProcessPlan.env_from_files`) and are never written into a
plan or a state file.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from pydantic import Field

from dynamo_oss.deployment.frozen import Frozen
from dynamo_oss.graph.errors import Problem

TLS_FIELD = "infrastructure.tls"


class InfrastructureTls(Frozen):
    """One node's TLS files: the authority every node trusts, and the node's own certificate and key."""

    ca: Path = Field(description="PEM certificate of the authority that signed every node's certificate")
    cert: Path = Field(
        description="this node's PEM certificate, served by embedded etcd and NATS and presented by clients"
    )
    key: Path = Field(description="the private key of `cert`")

    def for_node(self, node: str) -> InfrastructureTls:
        """The files of `node`: `{node}` in a path is its name."""
        return InfrastructureTls(**{name: Path(str(path).replace("{node}", node)) for name, path in self})

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that trusts only the graph's authority and presents this node's certificate;
        ssl.SSLError or OSError when a file is missing, not PEM, or the key does not match."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def problems(self) -> list[Problem]:
        """Why this node cannot use its files (unreadable, not PEM, a key that is not the certificate's)."""
        for name in ("ca", "cert", "key"):
            path: Path = getattr(self, name)
            if not path.is_file():
                return [
                    Problem(
                        path=f"{TLS_FIELD}.{name}",
                        message=f"{path} does not exist on this node; put "
                        f"the node's PEM file there, or point {TLS_FIELD}.{name} at it",
                    )
                ]
        try:
            self.client_context()
        except (ssl.SSLError, OSError) as error:
            return [
                Problem(
                    path=TLS_FIELD,
                    message=f"{self.cert} with {self.key}, trusting {self.ca}: {error}. "
                    "Give PEM files: the authority's certificate, the node's certificate and its own key",
                )
            ]
        return []

    def client_env(self) -> dict[str, str]:
        """Dynamo's settings that take paths: its NATS client, and both ends of its TCP request plane
        and response streams (each process serves one and dials the others')."""
        ca, cert, key = str(self.ca), str(self.cert), str(self.key)
        return {
            "NATS_TLS_CA_CERT_PATH": ca,
            "NATS_TLS_CLIENT_CERT_PATH": cert,
            "NATS_TLS_CLIENT_KEY_PATH": key,
            "DYN_TCP_TLS_CERT_PATH": cert,
            "DYN_TCP_TLS_KEY_PATH": key,
            "DYN_TCP_TLS_CLIENT_CA_CERT_PATH": ca,
            "DYN_TCP_TLS_CA_CERT_PATH": ca,
            "DYN_TCP_TLS_CLIENT_CERT_PATH": cert,
            "DYN_TCP_TLS_CLIENT_KEY_PATH": key,
        }

    def client_env_from_files(self) -> dict[str, Path]:
        """Dynamo's etcd client settings, which take the files' text."""
        return {"ETCD_AUTH_CA": self.ca, "ETCD_AUTH_CLIENT_CERT": self.cert, "ETCD_AUTH_CLIENT_KEY": self.key}

    @staticmethod
    def client_env_unset() -> list[str]:
        """What must not reach Dynamo's etcd client from the caller's environment: with a user and
        password set, it configures no TLS at all."""
        return ["ETCD_AUTH_USERNAME", "ETCD_AUTH_PASSWORD"]


class EtcdAccess(Frozen):
    """Where the graph's etcd answers, and the TLS files to reach it with (None: plain HTTP)."""

    endpoint: str
    tls: InfrastructureTls | None = None

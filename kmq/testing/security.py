"""Security for the local brokers: a throwaway CA made at start, SASL_SSL with SCRAM-SHA-512, and an authorizer.

``Security.create(directory)`` writes a CA and one node certificate (PEM, which Kafka reads as key and trust
stores: no Java keystore) and chooses a random password for the harness's super user. A secured node has three
listeners: clients connect with SASL_SSL (SCRAM-SHA-512 users, created at format time for the super user and
through the admin API for tenants); brokers and controllers talk over SSL with client certificates, so the nodes
are principals of their own (``User:CN=kmq-node``), super users like the harness's. KRaft's StandardAuthorizer
refuses whatever no ACL allows.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cryptography is imported when a secured broker starts (the dev extra), not with the harness
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate

#: The harness's super user (SCRAM-SHA-512), and the principal of the nodes' own certificate.
ADMIN_USER = "kmq-admin"
NODE_PRINCIPAL = "User:CN=kmq-node"
MECHANISM = "SCRAM-SHA-512"
CLIENT_LISTENER, INTERNAL_LISTENER, CONTROLLER_LISTENER = "SASL_SSL", "INTERNAL", "CONTROLLER"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
VALID_DAYS = 7


@dataclass(frozen=True)
class Security:
    """The files and the super user's password of one secured broker or cluster."""

    directory: Path
    admin_password: str

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def node_file(self) -> Path:
        """The nodes' private key (PKCS#8) and certificate chain, one PEM file: Kafka's PEM keystore."""
        return self.directory / "node.pem"

    @classmethod
    def create(cls, directory: Path) -> Security:
        """A new CA and node certificate (valid for 127.0.0.1 and localhost) under ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = _ca()
        node_key, node_cert = _signed("kmq-node", ca_key, ca_cert)
        security = cls(directory, secrets.token_urlsafe(24))
        security.ca_file.write_bytes(_pem(ca_cert))
        security.node_file.write_bytes(_key_pem(node_key) + _pem(node_cert) + _pem(ca_cert))
        security.node_file.chmod(0o600)
        return security

    def format_arguments(self) -> list[str]:
        """``StorageTool format`` arguments that create the super user (SCRAM needs no running broker then)."""
        return ["--add-scram", f"{MECHANISM}=[name={ADMIN_USER},password={self.admin_password}]"]

    def server_properties(self, port: int, internal_port: int, controller_port: int) -> dict[str, str]:
        """A node's listeners, TLS stores, SASL and authorizer settings (over kmq.testing.broker's own)."""
        ssl_required = {f"listener.name.{name.lower()}.ssl.client.auth": "required"
                        for name in (INTERNAL_LISTENER, CONTROLLER_LISTENER)}
        return {
            "listeners": f"{CLIENT_LISTENER}://127.0.0.1:{port},{INTERNAL_LISTENER}://127.0.0.1:{internal_port},"
                         f"{CONTROLLER_LISTENER}://127.0.0.1:{controller_port}",
            "advertised.listeners": f"{CLIENT_LISTENER}://127.0.0.1:{port},"
                                    f"{INTERNAL_LISTENER}://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:SSL,{INTERNAL_LISTENER}:SSL,"
                                              f"{CLIENT_LISTENER}:SASL_SSL",
            "inter.broker.listener.name": INTERNAL_LISTENER,
            "controller.listener.names": CONTROLLER_LISTENER,
            "sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.node_file),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            **ssl_required,
            "authorizer.class.name": AUTHORIZER,
            "super.users": f"User:{ADMIN_USER};{NODE_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def client_settings(self, user: str, password: str) -> dict[str, str]:
        """librdkafka settings (kmq's ``kafka`` mapping) for ``user``."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": MECHANISM, "sasl.username": user,
                "sasl.password": password, "ssl.ca.location": str(self.ca_file)}

    def admin_settings(self) -> dict[str, str]:
        """The super user's client settings: what the harness creates users and ACLs with."""
        return self.client_settings(ADMIN_USER, self.admin_password)


def _ca() -> tuple[EllipticCurvePrivateKey, Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kmq throwaway test CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _signed(common_name: str, ca_key: EllipticCurvePrivateKey,
            ca_cert: Certificate) -> tuple[EllipticCurvePrivateKey, Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _pem(cert: Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())

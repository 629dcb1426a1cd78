"""Certificates and kubeconfig of the local control plane (kiban.devtools.kube.certs)."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kiban.devtools.kube.certs import ADMIN_GROUP, generate_certs
from kiban.devtools.kube.kubeconfig import write_kubeconfig


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_ca_signs_a_serving_cert_for_loopback_and_an_admin_in_system_masters(
    tmp_path: Path,
) -> None:
    certs = generate_certs(tmp_path / "pki")
    ca, serving, admin = load(certs.ca_cert), load(certs.serving_cert), load(certs.admin_cert)

    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for leaf in (serving, admin):
        leaf.verify_directly_issued_by(ca)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    usage = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]

    organizations = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in organizations] == [ADMIN_GROUP] == ["system:masters"]
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_private_keys_are_owner_only_and_load_with_their_certs(tmp_path: Path) -> None:
    certs = generate_certs(tmp_path / "pki")
    for key in (certs.ca_key, certs.serving_key, certs.admin_key, certs.service_account_key):
        assert key.stat().st_mode & 0o077 == 0, key
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    context.load_cert_chain(str(certs.admin_cert), str(certs.admin_key))
    context.load_cert_chain(str(certs.serving_cert), str(certs.serving_key))
    assert b"PUBLIC KEY" in certs.service_account_pub.read_bytes()


def test_kubeconfig_embeds_the_ca_and_the_admin_credentials(tmp_path: Path) -> None:
    from kubernetes import client, config

    certs = generate_certs(tmp_path / "pki")
    path = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:6443", certs)
    assert path.stat().st_mode & 0o077 == 0
    document = yaml.safe_load(path.read_text())
    assert document["current-context"] == "kiban-dev"

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == "https://127.0.0.1:6443"
    assert Path(configuration.ssl_ca_cert).read_bytes() == certs.ca_cert.read_bytes()
    assert Path(configuration.cert_file).read_bytes() == certs.admin_cert.read_bytes()

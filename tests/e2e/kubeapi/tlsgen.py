"""A throwaway PKI for the emulator: a CA, a server certificate for 127.0.0.1
and localhost, and client certificates for kubeconfig client-cert auth."""
import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path, data, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _validity(builder):
    now = datetime.datetime.utcnow()
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(
        now + datetime.timedelta(days=30))


def make_ca(directory):
    """Writes ca.crt and ca.key in directory (kept if present)."""
    crt, key_path = os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")
    if os.path.exists(crt) and os.path.exists(key_path):
        return crt, key_path
    key = _key()
    name = _name("kubeapi-emulator-ca")
    cert = _validity(x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(key.public_key()).serial_number(x509.random_serial_number())
                     ).add_extension(x509.BasicConstraints(ca=True, path_length=None),
                                     critical=True
                     ).add_extension(x509.KeyUsage(
                         digital_signature=True, key_cert_sign=True, crl_sign=True,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False), critical=True
                     ).sign(key, hashes.SHA256())
    _write(key_path, _pem_key(key))
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return crt, key_path


def _load_ca(directory):
    with open(os.path.join(directory, "ca.key"), "rb") as f:
        key = serialization.load_pem_private_key(f.read(), None)
    with open(os.path.join(directory, "ca.crt"), "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    return key, cert


def _issue(directory, stem, subject, server):
    ca_key, ca_cert = _load_ca(directory)
    key = _key()
    builder = _validity(x509.CertificateBuilder().subject_name(subject)
                        .issuer_name(ca_cert.subject).public_key(key.public_key())
                        .serial_number(x509.random_serial_number()))
    builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                    critical=True)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    crt, key_path = os.path.join(directory, stem + ".crt"), os.path.join(directory, stem + ".key")
    _write(key_path, _pem_key(key))
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return crt, key_path


def make_server_cert(directory):
    crt, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    if os.path.exists(crt) and os.path.exists(key):
        return crt, key
    return _issue(directory, "server", _name("kubeapi-emulator"), server=True)


def make_client_cert(directory, user, groups=(), stem=None):
    """A client certificate (CN=user, O=groups) signed by the emulator's CA."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    return _issue(directory, stem or f"client-{user}", x509.Name(attrs), server=False)

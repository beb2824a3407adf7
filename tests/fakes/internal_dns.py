"""Compute Engine's internal DNS, as every VM on the network sees it, on a loopback UDP port.

Google documents (https://cloud.google.com/compute/docs/internal-dns): each VM gets an
internal DNS name, the zonal form `VM_NAME.ZONE.c.PROJECT_ID.internal`, "Compute Engine
automatically creates, updates, and removes" it and a PTR record for the VM's internal IP
address; the metadata server (169.254.169.254) is every VM's resolver, and it answers any VM
of the same VPC network for any other VM's name or address. The stand-in answers the same
questions for the instances that exist now (a deleted VM's records go with it):

- PTR for `D.C.B.A.in-addr.arpa` -> `VM_NAME.ZONE.c.PROJECT_ID.internal.`
- A for `VM_NAME.ZONE.c.PROJECT_ID.internal` -> its internal address
- anything else: NXDOMAIN (RFC 1035 wire format, class IN, one question per query).

A fake VM finds it in BENCH_FAKE_DNS (`127.0.0.1:PORT`), the counterpart of
169.254.169.254:53. Addresses come from the default network's us-central1 subnet
(10.128.0.0/20, https://cloud.google.com/vpc/docs/subnets#ip-ranges), from .2 up.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from collections.abc import Callable, Iterable

SUBNET = ipaddress.ip_network("10.128.0.0/20")
FIRST_HOST = 2  # .0 is the network, .1 the gateway (https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet)
_A, _PTR, _IN = 1, 12, 1
NXDOMAIN = 3

# (project, zone, name, internal address) of each instance that exists now.
Record = tuple[str, str, str, str]


def internal_name(project: str, zone: str, name: str) -> str:
    return f"{name}.{zone}.c.{project}.internal"


def address_for(index: int) -> str:
    """The index-th address handed out (0: the subnet's first usable one)."""
    return str(SUBNET.network_address + FIRST_HOST + index)


def _read_name(packet: bytes, offset: int) -> tuple[str, int]:
    labels = []
    while True:
        length = packet[offset]
        offset += 1
        if length == 0:
            return ".".join(labels), offset
        labels.append(packet[offset : offset + length].decode("ascii"))
        offset += length


def _encode_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode("ascii")
    return out + b"\0"


def answer(query: bytes, records: Iterable[Record]) -> bytes:
    """The reply to one DNS query."""
    ident, flags = struct.unpack("!HH", query[:4])
    name, end = _read_name(query, 12)
    qtype, qclass = struct.unpack("!HH", query[end : end + 4])
    question = query[12 : end + 4]
    rdata = None
    for project, zone, vm, address in records:
        fqdn = internal_name(project, zone, vm)
        reverse = ipaddress.ip_address(address).reverse_pointer
        if qclass == _IN and qtype == _PTR and name.lower() == reverse:
            rdata = _encode_name(fqdn)
        elif qclass == _IN and qtype == _A and name.lower().rstrip(".") == fqdn:
            rdata = socket.inet_aton(address)
    rd = flags & 0x0100
    if rdata is None:
        header = struct.pack("!HHHHHH", ident, 0x8180 | rd | NXDOMAIN, 1, 0, 0, 0)
        return header + question
    header = struct.pack("!HHHHHH", ident, 0x8180 | rd, 1, 1, 0, 0)
    record = b"\xc0\x0c" + struct.pack("!HHIH", qtype, _IN, 60, len(rdata)) + rdata
    return header + question + record


class InternalDns:
    """The resolver on its own loopback UDP port; `records()` says what exists now."""

    def __init__(self, records: Callable[[], list[Record]]) -> None:
        self.records = records
        self.queries: list[str] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.2)  # so that stop() is seen
        self.port = self._socket.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> InternalDns:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                query, peer = self._socket.recvfrom(512)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                self.queries.append(_read_name(query, 12)[0])
                self._socket.sendto(answer(query, self.records()), peer)
            except (IndexError, UnicodeDecodeError, struct.error, OSError):
                continue  # a malformed query gets no answer

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        self._socket.close()

#!/usr/bin/env python3
"""RoCEv2 test vectors for tests/unit/test_roce_wire.cc, computed independently of hw/rnic.

Every frame here is built from the specification with struct and zlib.crc32 alone (InfiniBand
Architecture Specification Vol 1 ch. 9 for the BTH and the extension headers, 7.8.1 and Annex
A17.4.3 for the ICRC over the masked IPv4/UDP/BTH), and one is a frame captured from real
hardware: a RoCEv2 CNP sent by a Mellanox ConnectX-4 Lx, published in scapy's regression tests
(secdev/scapy, test/contrib/roce.uts, "RoCE CNP captured on ConnectX-4 Lx"; its ICRC 0x82fd002a
as scapy reads the field, i.e. bytes 82 fd 00 2a on the wire).

    python3 tests/unit/roce_vectors.py                 print the C header to stdout
    python3 tests/unit/roce_vectors.py --write FILE    write it
    python3 tests/unit/roce_vectors.py --check FILE    exit 1 if FILE differs (meson test 'roce_vectors')
"""
import struct
import sys
import zlib

ROCE_PORT = 4791


def icrc(ip_to_end: bytes) -> bytes:
    """IBA 7.8.1 / A17.4.3: CRC-32 over 8 x 0xFF, then IPv4 + UDP + BTH with TOS, TTL, IP checksum,
    UDP checksum and BTH byte 4 (FECN, BECN, resv6) set to 1s, then the rest; sent LSB first."""
    m = bytearray(ip_to_end)
    m[1] = 0xFF                  # TOS (DSCP + ECN)
    m[8] = 0xFF                  # TTL
    m[10:12] = b"\xff\xff"       # header checksum
    m[20 + 6:20 + 8] = b"\xff\xff"  # UDP checksum
    m[20 + 8 + 4] = 0xFF         # BTH resv8a
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(m)) & 0xFFFFFFFF)


def ip_csum(hdr: bytes) -> int:
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(opcode: int, dqpn: int, psn: int, ext: bytes = b"", payload: bytes = b"", *, se: bool = False,
          ackreq: bool = False, pkey: int = 0xFFFF, fecn: bool = False, becn: bool = False, tos: int = 0,
          ttl: int = 64, ip_id: int = 0, sport: int = 0xC000, src: int = 0xC6120001, dst: int = 0xC6120002,
          dmac: bytes = b"\x02\x52\x4b\x00\x00\x01", smac: bytes = b"\x02\x52\x4b\x00\x00\x00") -> bytes:
    pad = (4 - len(payload) % 4) % 4
    bth = struct.pack("!BBHB3sB3s", opcode, (0x80 if se else 0) | pad << 4, pkey,
                      (0x80 if fecn else 0) | (0x40 if becn else 0), dqpn.to_bytes(3, "big"),
                      0x80 if ackreq else 0, psn.to_bytes(3, "big"))
    transport = bth + ext + payload + b"\0" * pad
    udp_len = 8 + len(transport) + 4
    udp = struct.pack("!HHHH", sport, ROCE_PORT, udp_len, 0)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, ip_id, 0x4000, ttl, 17, 0,
                               src.to_bytes(4, "big"), dst.to_bytes(4, "big")))
    ip[10:12] = struct.pack("!H", ip_csum(bytes(ip)))
    body = bytes(ip) + udp + transport
    return dmac + smac + b"\x08\x00" + body + icrc(body)


def reth(va: int, rkey: int, length: int) -> bytes:
    return struct.pack("!QII", va, rkey, length)


def aeth(syndrome: int, msn: int) -> bytes:
    return struct.pack("!B3s", syndrome, msn.to_bytes(3, "big"))


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 13 + seed) & 0xFF for i in range(n))


# ConnectX-4 Lx CNP (scapy test/contrib/roce.uts): 10.0.17.1 -> 10.0.18.1, BECN set, dqpn 0x118.
CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
    "0a0011010a0012010000" "12b700280000" "8100ffff40000118000000000000000000000000000000000000000082fd002a")

# (name, frame, opcode, dqpn, psn, payload length)
VECTORS = [
    ("cx4lx_cnp", CX4_CNP, 0x81, 0x118, 0, 0),
    ("send_only_pad3", frame(0x04, 0x000011, 0x000001, payload=b"hello", se=True, ackreq=True), 0x04, 0x11, 1, 5),
    ("send_first_256", frame(0x00, 0x000011, 0xFFFFFF, payload=pattern(256, 1)), 0x00, 0x11, 0xFFFFFF, 256),
    ("send_last_imm", frame(0x03, 0x000011, 0x000000, struct.pack("!I", 0xDEADBEEF), pattern(7, 2), ackreq=True),
     0x03, 0x11, 0, 7),
    ("write_first_reth", frame(0x06, 0x123456, 0x00ABCD, reth(0x7F0000001000, 0x00C0FFEE, 4096), pattern(1024, 3)),
     0x06, 0x123456, 0xABCD, 1024),
    ("write_only_imm", frame(0x0B, 0x000022, 0x000100, reth(0x1000, 0x42, 3) + struct.pack("!I", 7), b"abc",
                             ackreq=True), 0x0B, 0x22, 0x100, 3),
    ("read_request", frame(0x0C, 0x000022, 0x800000, reth(0xFFFFFFFFFFFF0000, 0x11223344, 1 << 20), ip_id=0x1234),
     0x0C, 0x22, 0x800000, 0),
    ("read_resp_only", frame(0x10, 0x000033, 0x000005, aeth(0x1F, 0x000003), pattern(61, 4), ttl=1, tos=0xB8),
     0x10, 0x33, 5, 61),
    ("ack", frame(0x11, 0x000033, 0x000009, aeth(0x1F, 0xFFFFFF)), 0x11, 0x33, 9, 0),
    ("nak_psn_seq", frame(0x11, 0x000033, 0x00000A, aeth(0x60, 0x000004)), 0x11, 0x33, 10, 0),
    ("rnr_nak", frame(0x11, 0x000033, 0x00000A, aeth(0x20 | 14, 0x000004)), 0x11, 0x33, 10, 0),
    ("cmp_swap", frame(0x13, 0x000044, 0x000077, struct.pack("!QIQQ", 0x2000, 0x99, 0x1111, 0x2222)),
     0x13, 0x44, 0x77, 0),
    ("fetch_add", frame(0x14, 0x000044, 0x000078, struct.pack("!QIQQ", 0x2008, 0x99, 1, 0), fecn=True, becn=True),
     0x14, 0x44, 0x78, 0),
    ("atomic_ack", frame(0x12, 0x000055, 0x000078, aeth(0x1F, 0x10) + struct.pack("!Q", 0x0123456789ABCDEF)),
     0x12, 0x55, 0x78, 0),
    ("flush", frame(0x1C, 0x000044, 0x000079, struct.pack("!I", 0x13) + reth(0x3000, 0x99, 64)), 0x1C, 0x44, 0x79, 0),
    ("atomic_write", frame(0x1D, 0x000044, 0x00007A, reth(0x3008, 0x99, 8), struct.pack("!Q", 0xFEEDFACECAFEBEEF)),
     0x1D, 0x44, 0x7A, 8),
]


def header() -> str:
    out = ["// SPDX-License-Identifier: MIT",
           "// Generated by tests/unit/roce_vectors.py (do not edit; `meson test roce_vectors` compares).",
           "// RoCEv2 frames built from the specification with Python's struct and zlib.crc32, and one",
           "// CNP captured from a ConnectX-4 Lx (scapy test/contrib/roce.uts). See the script.",
           "#pragma once", "// clang-format off", "", "#include <cstddef>", "#include <cstdint>", "",
           "struct RoceVector {", "    const char *name;", "    const uint8_t *frame;", "    size_t len;",
           "    uint8_t opcode;", "    uint32_t dqpn, psn, payload_len;", "    uint32_t icrc; // as sent LSB first",
           "};", ""]
    for name, f, *_ in VECTORS:
        out.append(f"static const uint8_t roce_vec_{name}[{len(f)}] = {{")
        for i in range(0, len(f), 16):
            out.append("    " + ", ".join(f"0x{b:02x}" for b in f[i:i + 16]) + ",")
        out.append("};")
    out.append("")
    out.append("static const RoceVector roce_vectors[] = {")
    for name, f, op, qpn, psn, plen in VECTORS:
        ic = struct.unpack("<I", f[-4:])[0]
        out.append(f"    {{\"{name}\", roce_vec_{name}, {len(f)}, 0x{op:02x}, 0x{qpn:06x}, 0x{psn:06x}, {plen}, "
                   f"0x{ic:08x}u}},")
    out.append("};")
    out.append("// clang-format on")
    return "\n".join(out) + "\n"


def main() -> int:
    # The captured frame's ICRC must come out of the same computation as ours: the masking rule
    # and the byte order are confirmed by hardware before any vector is trusted.
    if icrc(CX4_CNP[14:-4]) != CX4_CNP[-4:]:
        print("roce_vectors: the ICRC rule does not reproduce the ConnectX-4 Lx frame", file=sys.stderr)
        return 1
    text = header()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        with open(sys.argv[2], "w") as f:
            f.write(text)
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            if f.read() != text:
                print(f"roce_vectors: {sys.argv[2]} is stale: regenerate with --write", file=sys.stderr)
                return 1
        print(f"roce_vectors: {len(VECTORS)} vectors match, captured ICRC reproduced")
        return 0
    if len(sys.argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

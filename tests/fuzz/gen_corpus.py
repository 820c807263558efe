#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpus of every fuzz harness into tests/fuzz/corpus/<name>/ (docs/fuzzing.md).

Each seed is a short, valid operation sequence in the byte format the harness documents at its
top (fuzz_input.h: little-endian fields from the front), so the fuzzers start from inputs that
reach the devices' pipelines instead of discovering the formats by chance."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
u8 = lambda v: struct.pack('<B', v & 0xff)
u16 = lambda v: struct.pack('<H', v & 0xffff)
u32 = lambda v: struct.pack('<I', v & 0xffffffff)
u64 = lambda v: struct.pack('<Q', v & 0xffffffffffffffff)

MAGIC = 0x524b4646


def vmbox():
    st = lambda off, val, size=3: u8(0) + u32(off) + u64(val) + u8(size)   # size index 3 = 8 bytes
    ld = lambda off, size=3: u8(1) + u32(off) + u8(size)
    def frame(mif, words, typ=1, op=1, ln=None, src=0):
        payload = u16(mif) + u16(src) + u32(len(words)) + b''.join(u64(w) for w in words)
        ln = len(payload) if ln is None else ln
        return u8(2) + u8(typ) + u16(op) + u8(2) + u16(ln) + u64(7) + payload
    yield 'store-load', u8(3) + st(0x40018, 1) + st(0, 0x1122) + st(0, 0x3344) + ld(0x800) + ld(0) + ld(0x40010) + ld(0)
    yield 'full-nack', u8(1) + st(0x1000, 1) + st(0x1000, 2) + st(0x1000, 3) + ld(0x40030)
    yield 'delivery', u8(7) + st(0x40018, ~0) + frame(5, [1, 2, 3, 4]) + frame(5, [9] * 8) + ld(0x5000) + ld(0x40020)
    yield 'bad-delivery', u8(7) + frame(64, [1]) + frame(1, [1, 2], ln=13) + frame(1, [1], typ=3)
    yield 'burst-issue', u8(0x83) + u8(3) + u8(9) + u8(6) + u64(1) * 20 + st(0x40028, 1 << 9) + u8(4)
    yield 'sub-word', u8(3) + st(0, 5, 0) + st(4, 5, 2) + ld(0, 2) + ld(0x40000, 1)
    # the KIF (index 64): enabled with its interrupt, a delivery from a KIF, one forged from PIF 3, a refused CPU store
    yield 'kif', (u8(7) + st(0x40108, 3) + frame(64, [1, 2, 3, 4], src=64) + frame(64, [5, 6, 7, 8], src=3)
                  + ld(0x41800) + ld(0x41000) + st(0x41000, 9) + ld(0x40110) + ld(0x40120) + ld(0x40138) + st(0x40118, 1))
    yield 'kif-off', u8(0x3e) + st(0x40108, 1) + frame(64, [1, 2, 3, 4], src=64) + ld(0x40100) + ld(0x41000)
    # deliver answering first, with a nested operation inside the answer: 0 none, 2 a store, 3 FLUSH, 4 reset
    held = lambda mif, n, nested, val=0: u8(6) + u8(mif) + u8(1) + u8(n) + u8(nested) + u64(val) + b''.join(u64(0x60 + i) for i in range(20))
    yield 'answer-first', (u8(15) + st(0x40018, ~0) + held(5, 4, 0) + held(5, 4, 2, 0x77) + held(5, 4, 3, ~0) + ld(0x5000)
                           + held(5, 4, 4) + held(64, 4, 0) + ld(0x5000))
    save = lambda how, which=0, val=0: u8(5) + u8(how) + u8(which) + u16(val)   # how: 0 as is, 1 depth, 2 overfull, 3 contents
    yield 'save-load', (u8(7) + st(0x40018, 1 << 3) + st(0x3000, 0x33) + st(0x3000, 0x34) + ld(0x3000) + frame(63, [5, 6])
                        + save(0) + save(1, 0, 9) + save(2, 3) + save(3, 4, 5))


def packetizer():
    st = lambda off, val, size=3: u8(0) + u32(off) + u64(val) + u8(size)
    ld = lambda off, size=3: u8(1) + u32(off) + u8(size)
    tif = 0x40000
    setup = st(tif + 0x208, ~0) + st(tif + 0x200, 0) + st(tif + 8, 0xabcdef)
    def packet(pif, dest):
        b = pif << 12
        return st(b, 0x1111) + st(b + 8, 0x2222) + st(b + 0x10, 3) + st(b + 0x18, 4) + st(b + 0x20, dest) + st(b + 0x28, 0)
    yield 'send-ack', setup + packet(1, 0x2000) + ld(0x1030) + u8(2) + u8(0) + u8(0) + ld(0x1030) + ld(tif + 0x310)
    yield 'send-nack', setup + packet(2, 0x3000) + u8(2) + u8(0) + u8(1) + ld(0x2030)
    yield 'inline-ack', u8(5) + u8(0) + setup + packet(3, 0x4000) + ld(0x3030)
    yield 'illegal', st(tif + 0x208, ~0) + st(tif + 0x200, 0x40000) + packet(4, 0x1000) + ld(0x4030) + ld(tif + 0x320)
    yield 'overwrite-clr', setup + packet(5, 0) + st(0x5000, 1) + st(tif + 0x210, 1 << 5) + ld(0x5030) + u8(3) + u8(4)
    yield 'bytes', setup + st(0x6000, 1, 0) + st(0x6001, 2, 1) + st(0x6004, 3, 2) + ld(0x6000, 0)
    save = lambda how, which=0, val=0: u8(6) + u8(how) + u8(which) + u64(val)  # how: 0 as is, 1-5 one field changed
    # the KIF (page 0x41000): KIF_PIDT, KIF_CONF, then a packet to a MIF and one to a KIF page
    kif = st(tif + 0x408, 0x123456) + st(tif + 0x410, 1)
    yield 'kif-send', (setup + kif + packet(0x41, 0x41000) + ld(0x41030) + u8(2) + u8(0) + u8(0) + packet(0x41, 0x2000)
                       + ld(tif + 0x420) + ld(tif + 0x400) + st(tif + 0x418, 1) + ld(0x41030))
    yield 'kif-illegal', setup + kif + packet(0x41, 0x42000) + packet(1, 0x41000) + ld(0x41030) + ld(0x1030)
    yield 'save-load', (setup + packet(1, 0x2000) + st(0x7000, 7) + st(0x7020, 0x2000) + save(0) + save(1, 1, 1 << 48)
                        + save(3, 1, 0x3) + save(4, 7, 1) + save(5, 7, 0xff00) + save(2, 0, 0x40000))


def cdma():
    RAM = 0x1000
    st = lambda off, val, size=0: u8(0) + u16(off) + u64(val) + u8(size)   # size index 0 = 4 bytes
    ld = lambda off: u8(1) + u16(off) + u8(0)
    mem = lambda off, data: u8(2) + u16(off) + u8(len(data)) + data
    def desc(nxt, sa, da, btt, status=0):
        return u32(nxt) + u32(0) + u32(sa) + u32(0) + u32(da) + u32(0) + u32(btt) + u32(status)
    yield 'simple', u8(0x13) + mem(0, bytes(range(64))) + st(0, 0x1001) + st(0x18, RAM) + st(0x20, RAM + 0x800) + st(0x28, 64) + ld(4)
    chain = mem(0x100, desc(RAM + 0x140, RAM, RAM + 0x400, 32)) + mem(0x140, desc(RAM + 0x100, RAM + 0x20, RAM + 0x600, 100))
    sg = st(0, 0x1008 | 0x3000 | 0x10000) + st(0x08, RAM + 0x100) + st(0x0c, 0) + st(0x10, RAM + 0x140) + st(0x14, 0)
    yield 'sg-chain', u8(0x0b) + mem(0, bytes(range(128))) + chain + sg + ld(4) + ld(0x08) + st(4, 0x7000)
    yield 'sg-error', u8(0x0b) + mem(0x100, desc(RAM + 0x140, 0x8000, RAM, 16)) + st(0, 0x5008) + st(0x08, RAM + 0x100) + st(0x14, 0) + ld(4)
    yield 'keyhole', u8(0x02) + st(0, 0x30) + st(0x18, RAM) + st(0x20, RAM + 0x100) + st(0x28, 300) + ld(4) + st(0, 4) + ld(0)
    yield 'state', u8(0) + u8(6) + u8(5) + u32(0x10002) + u32(2) + u64(RAM) + u64(RAM) + u64(0) * 2 + u32(0) + u32(1) + u32(0) + u8(2) + u8(0) + u64(0) * 2 + u8(3)


def gas():
    RAM = 0x40000000
    def win(node, local_off, kind=0):
        return u8(node) + u8(kind) + u16(local_off + 0x10)   # local = RAM - 0x10 + u16
    ld = lambda node, off, size=3: u8(0) + win(node, off) + u8(size)
    st = lambda node, off, val, size=3: u8(1) + win(node, off) + u64(val) + u8(size)
    yield 'local', u8(0x05) + st(1, 0x100, 0x1234) + ld(1, 0x100) + ld(1, 0x100, 0) + u8(2) + u16(0x40) + u8(3) + u8(0)
    yield 'remote', u8(0x01) + st(1, 0x80, 0x55) + u8(0) + ld(1, 0x80) + u8(1) + u64(0x99) + ld(1, 8) + u8(2) + u8(1)
    yield 'remote-forged', u8(0x01) + ld(1, 0x10) + u8(4) + u8(1) + u8(3) + ld(1, 0x20) + u8(3) + u8(7) + ld(1, 0x30) + u8(5) + u8(0)
    yield 'edges', u8(0x02) + ld(0, 0xff8, 0) + u8(0) + u8(0) + u8(0xd0) + u8(3) + u8(3) + ld(3, 0) + u8(2) + u16(0x1000) + u8(3) + u8(0)
    def serve(op, addr_off, ln, data=b''):
        return u8(4) + u8(0) + u8(op) + u8(2) + u8(0) + u64(9) + u8(1) + u16(addr_off + 8) + u8(ln) + data
    yield 'serve', u8(0x01) + u8(3) + u16(0) + u8(16) + bytes(range(16)) + serve(1, 0, 16) + serve(2, 0x20, 8, b'ABCDEFGH') + serve(1, 0xff8, 16) + serve(2, 0, 0)
    yield 'stray', u8(0x01) + u8(5) + u8(1) + u8(1) + u8(0) + u8(8) + u64(1) + u8(6) + u8(0)


def rmc():
    RAM = 0x40000000
    WQ0, CQ0 = RAM, RAM + 0x4000
    cfg = lambda c=0, q=0, v=0x10: u8(9) + u8(c) + u8(q) + u8(v)
    poke = lambda off, data: u8(2) + u16(off) + u8(len(data)) + data
    def wqe(op, node, length, roff=0, loff=0, a=0, b=0, flags=0):
        return u8(op) + u8(flags) + u16(node) + u32(length) + u64(1) + u64(roff) + u64(loff) + u64(a) + u64(b) + u64(0) * 2
    db = lambda q, tail: u8(0) + u8(3) + u16(q | (0 << 8)) + u64(tail) + u8(0)
    settle = u8(7)
    ld = lambda region, r: u8(1) + u8(region) + u16(r) + u8(0)
    # local (node 0 to itself) requests through all three pipelines
    local = poke(0, wqe(1, 0, 256, 0, 0x1000)) + poke(64, wqe(2, 0, 100, 0x200, 0)) + poke(128, wqe(3, 0, 8, 0x40, 0, 0, 7))
    yield 'local', u8(0x00) + cfg(0, 0, 0x20) + local + db(0, 3) + settle + ld(4, 0) + ld(3, 0x1800)
    yield 'sabre', u8(0x00) + cfg(1, 0, 0x20) + poke(0x8000, u64(2)) + poke(0, wqe(5, 0, 256, 0, 0x2000)) + db(0, 1) + settle + ld(4, 0xb8)
    remote = poke(0, wqe(1, 1, 300, 0, 0)) + poke(64, wqe(4, 1, 8, 8, 0, 5))
    ans = lambda idx, mode: u8(4) + u16(idx) + u8(0) + u8(mode)
    yield 'remote', u8(0x01) + cfg() + remote + db(0, 2) + settle + ans(0, 3) + u64(0) * 40 + ans(1, 2) + u8(0) + u8(0) + u64(6) + u32(0) + settle
    def req(op, off, ln, ctx=0, extra=b''):
        nblk = ((off % 64) + ln + 63) // 64 if ln else 0
        return (u8(3) + u8(1) + u8(op) + u8(1) + u64(5) + u8(1) + u8(ctx) + u8(0) + u32(1) +
                u16(off) + u16(ln) + extra)
    yield 'serve', u8(0x01) + cfg() + req(1, 0, 200) + req(2, 64, 16, extra=b'x' * 16) + req(3, 8, 8, extra=u64(0) + u64(1)) + req(5, 0, 128) + ld(4, 0x88)
    yield 'bad-wqe', u8(0x00) + cfg() + poke(0, wqe(9, 0, 8)) + poke(64, wqe(1, 7, 0)) + db(0, 2) + settle + u8(6) + u8(0) + u8(8)
    pause, save_load, fault = u8(10), lambda how: u8(11) + u8(how), lambda mode: u8(12) + u8(mode)
    # a remote request in flight, the core paused (the VM stopped), saved and loaded (the transfer
    # completes UNREACHABLE), resumed; then a corrupted load
    yield 'migrate', (u8(0x01) + cfg() + remote + db(0, 2) + settle + pause + req(1, 0, 64) + save_load(0) + pause +
                      settle + ld(2, 0x20) + save_load(1) + u32(0x30) + u8(5))
    # DMA maps refused (fallback to dma_read/dma_write), then DMA failing too
    yield 'faults', (u8(0x00) + cfg(0, 0, 0x20) + fault(1) + local + db(0, 3) + settle + req(3, 8, 8, extra=u64(0) + u64(1)) +
                     fault(2) + poke(192, wqe(1, 0, 64, 0, 0x1000)) + db(0, 4) + settle + fault(0))


def r2p2():
    reg = lambda src, qp, x, base, nb, vo, spec: u8(0) + u8(src) + u8(qp) + u8(x) + u8(base) + u8(nb) + u8(vo) + u8(spec)
    req = lambda idx, k: u8(1) + u8(idx) + u8(k)
    step = u8(2)
    done = lambda idx, ver: u8(3) + u8(idx) + u64(ver) + bytes(56)
    yield 'ok', u8(0x1b) + reg(0, 0, 0, 1, 4, 0, 1) + req(0, 4) + step * 5 + done(0, 2) + done(0, 0) + done(0, 0) + done(0, 0)
    yield 'locked', u8(0x1b) + reg(0, 0, 1, 2, 6, 8, 1) + req(0, 6) + step * 3 + done(0, 3) + done(0, 0) + done(0, 0)
    yield 'window', u8(0x1b) + reg(1, 0, 0, 3, 8, 0, 1) + req(0, 8) + step * 4 + done(1, 0) + u8(5) + u64(0x10000 + 3 * 64 + 64 + 3 * 0) + done(0, 4)
    yield 'stall', u8(0x00) + reg(0, 0, 0, 1, 2, 0, 1) + reg(0, 1, 0, 2, 2, 0, 0) + req(0, 2) + req(1, 2) + step * 4 + done(0, 0) + done(0, 0) + step * 4 + done(0, 0)


def bridge():
    def frame(node, typ, svc, dst, ln, tag, op=1, flags=0, status=0, payload=b''):
        return (u8(0) + u8(node) + u8(flags) + u8(typ - 1) + u8(svc) + u8(op) + u8(dst) + u8(ln) +
                u8(status) + u8(tag) + payload.ljust(ln, b'\0'))
    yield 'req-reply', u8(1) + frame(0, 1, 2, 1, 8, 5) + frame(1, 2, 2, 0, 8, 5) + frame(1, 2, 2, 0, 0, 6)
    yield 'noroute', u8(1) + frame(0, 1, 1, 3, 0, 1) + frame(0, 3, 1, 1, 16, 2)
    yield 'malformed', u8(2) + frame(0, 1, 1, 1, 0, 1, flags=1) + u32(0) + frame(1, 1, 1, 0, 0, 2, flags=8) + u16(3)
    yield 'congested', u8(1) + u8(2) + u8(1) + frame(0, 1, 1, 1, 4, 1) * 8 + u8(3) + u8(1)
    yield 'corrupt', u8(1) + frame(0, 1, 1, 1, 0, 9) + u8(1) + u8(1) + u32(5000)
    yield 'handshake', u8(0) + u8(5) + u8(0) + u8(48) + u32(0x524b4648) + u16(1) + u16(3) + u32(8) + u32(0) + b'n' * 32 + u8(1) + u8(5) + u8(0) + u8(10) + b'x' * 10 + u8(0)


def port():
    def frame(typ, svc, ln, tag, flags=0, op=1):
        return u8(0) + u8(flags) + u8(typ - 1) + u8(svc) + u8(op) + u8(0) + u8(ln) + u8(0) + u8(tag) + bytes(ln)
    yield 'echo', u8(0) + frame(1, 2, 16, 1) + frame(1, 3, 12, 2) + frame(2, 4, 0, 3) + frame(3, 1, 32, 4) + u8(2)
    yield 'bad-frames', u8(0) + frame(1, 1, 0, 1, flags=1) + u32(7) + frame(1, 9, 0, 2, flags=4) + u8(9) + frame(1, 1, 0, 3, flags=16) + u16(900)
    yield 'corrupt', u8(0) + frame(1, 2, 4, 1) + u8(1) + u32(4096)
    yield 'unsealed', u8(1) + frame(1, 2, 4, 1)
    yield 'short-shm', u8(2)
    yield 'bad-magic', u8(4) + u32(1)
    yield 'bad-geometry', u8(8) + u32(512) + u32(256)
    yield 'refused', u8(16 | 64) + u16(2) + b'r' * 104
    yield 'no-fds', u8(32)


def atomic_unit():
    def op(w, o, size=8, off=0, operand=1, compare=0, mask=0, gap=0, flags=0):
        return u8(w) + u8(o) + u8(size) + u8(off) + u64(operand) + u64(compare) + u64(mask) + u16(gap) + u8(flags)
    cfg = lambda geo, modes, tags=32, regs=8, la=8, lat=125: u8(geo) + u8(modes) + u8(tags) + u8(regs) + u8(la) + u8(lat)
    yield 'hotspot-dm32', cfg(3, 1 | (3 << 2)) + op(0, 0) * 40
    yield 'spread-nocache', cfg(0, 1) + b''.join(op(i % 16, i % 6, 8 if i % 3 else 4, 4 * (i % 2)) for i in range(48))
    yield 'flush-1line', cfg(1 | (1 << 3), 2) + b''.join(op(i % 2, 0, gap=3) for i in range(30))
    yield 'errors', cfg(4, 1) + op(0, 9) + op(1, 0, 3) + op(2, 0, 8, 4) + op(40, 0) + op(255, 0) + op(3, 5, 8, 0, 7, 3, ~0)



def rnic():
    RAM = 0x40000000
    st = lambda off, val, size=0: u8(0) + u16(off) + u64(val) + u8(size)   # size index 0 = 4 bytes
    ld = lambda off: u8(1) + u16(off) + u8(0)
    db = lambda off, val: u8(2) + u32(off) + u32(val) + u8(0)
    mem = lambda off, data: u8(4) + u16(off) + u8(len(data)) + data
    poll = lambda ns: u8(8) + u32(ns)

    def cmd(op, handle=0, params=b''):
        c = u16(op) + u16(0) + u32(handle) + u32(0) + u32(0) + params
        return u8(5) + c + bytes(128 - len(c))
    enable = st(0x2C, 1) + st(0x204, 0xff)
    pd = cmd(1)
    cq = cmd(5, 0, u64(RAM + 0x1000) + u8(4) + u8(1) + u16(0) + u32(0))
    qp = cmd(7, 1, u64(RAM + 0x2000) + u64(RAM + 0x3000) + u32(0) + u32(0) + u8(4) + u8(4) + u16(0) + u32(0))
    mr = cmd(3, 1, u64(RAM + 0x4000) + u64(0x4000) + u64(0) + u32(0) + u32(0xf | 0x300) + u8(12) + u8(1) + u16(0) + u32(0))

    def modify(mask, state, mtu=0, dest_qpn=0, node=0):
        m = (u32(mask) + u8(state) + u8(10) + u8(3) + u8(7) + u8(1) + u8(4) + u8(4) + u8(0) + u16(mtu) + u16(0xffff)
             + u32(0xe) + u32(dest_qpn) + u32(0) + u32(0) + u32(node) + u32(0) + bytes(6) + u16(0) + bytes(16))
        return cmd(8, 0x100, m)
    up = (modify(0x9, 1) + modify(0x1 | 0x100 | 0x100000 | 0x1000 | 0x20000 | 0x8000 | 0x80, 2, 256, 0x100)
          + modify(0x1 | 0x10000 | 0x200 | 0x400 | 0x800 | 0x2000, 3))
    # a WRITE of 300 bytes from the MR to itself (loopback), then a READ
    wqe = lambda op, wr, ln: (u64(wr) + u8(op) + u8(1) + u8(1) + u8(0) + u32(0) + u64(RAM + 0x6000) + u32(1)
                              + u32(0) + u64(1) + u64(0) + bytes(16) + u64(RAM + 0x4000) + u32(ln) + u32(1))
    w = wqe(0, 1, 300)
    r = wqe(4, 2, 300)
    post = mem(0x2000, w[:128]) + mem(0x2080, r[:128]) + db(0, 2) + poll(1000)
    yield 'setup', enable + pd + cq + qp + mr + ld(0x10C)
    yield 'loopback', enable + pd + cq + qp + mr + up + post + ld(0x1000) + db(0x100000, 2) + db(0x100004, 1)
    yield 'frames', enable + pd + cq + qp + mr + up + post + u8(7) + u8(0) + u16(40) + u8(0x83) + poll(100000000)
    yield 'bad', enable + pd + cq + qp + db(0, 1000) + cmd(99) + cmd(2, 1) + u8(6) + u16(60) + bytes(60) + u8(9)


def switch_stage():
    # config byte: bit 0 802.1Q, bit 1 malformed=drop, bit 2 a rewriting program (bit 3 swordbox,
    # bits 4-7 mux, locks, steer, ring=4), else bits 3-7 opcount's qps - 1
    built = lambda op, psn, qpn, ln, flips=b'': u8(1) + u8(op) + u32(psn) + u8(qpn) + u16(ln) + u8(len(flips) // 3) + flips
    raw = lambda b: u8(0) + u16(len(b)) + b
    # valid-opcode indices: 0x13 (CAS) is index 19, 0x11 (ACK) 17, 0x0A (WRITE ONLY) 10
    ops = built(10, 100, 1, 13) + built(19, 101, 1, 0) + built(17, 101, 2, 0) + built(12, 102, 1, 0)
    yield 'opcount', u8(0x18) + ops + built(10, 100, 1, 13)
    yield 'rewrite', u8(0x04) + ops
    yield 'rewrite-vlan', u8(0x05) + ops
    # swordbox (bit 3), mux + locks + steer: a client's request, the server's answer, a CAS, a read
    sb = built(10, 100, 2, 13) + built(17, 100, 2, 0) + built(10, 200, 1, 13) + built(17, 200, 1, 0) + ops
    yield 'swordbox', u8(0x7C) + sb
    yield 'swordbox-ring4', u8(0xAC) + sb + ops + ops
    yield 'corrupt', u8(0x06) + built(19, 5, 3, 0, u16(20) + u8(0x40)) + built(10, 6, 3, 9, u16(60) + u8(1)) + raw(bytes(50))


def pmem():
    store = lambda off, ln, b: u8(0) + u16(off) + u8(ln) + u8(b)
    nic = lambda off, ln, b: u8(5) + u16(off + 64) + u16(ln) + u8(b)        # address: base - 64 + u16
    placed = lambda off, ln, b: u8(4) + u16(off + 64) + u16(ln) + u8(b)
    rng = lambda op, off, ln: u8(op) + u16(off + 64) + u8(0) + u16(ln)     # 1 dirty, 2 write-back, 3 FLUSH
    wait = lambda ns: u8(6) + u16(ns)
    cut = lambda k, want: u8(13) + u8(k) + u8(want)
    work = (store(0, 8, 1) + store(64, 16, 2) + nic(128, 8, 3) + wait(50) + nic(4096, 200, 4) + wait(100)
            + placed(8192, 64, 5) + store(200, 64, 6))
    for mode, name in enumerate(['none', 'eadr', 'adr', 'adr-ddio']):
        conf = mode | (4 << 2) | (1 << 5)   # 4 NIC entries, 6 LLC lines
        yield name, u8(conf) + work + rng(2, 0, 64) + rng(3, 4096, 256) + cut(1, 3)
    yield 'evict', u8(3 | (2 << 2)) + b''.join(placed(i * 64, 8, i) for i in range(8)) + cut(2, 200)
    yield 'bad', u8(2 | (1 << 2)) + rng(1, 0x7ff0, 64) + u8(2) + u16(0) + u8(0xff) + u64(2 ** 64 - 1) + nic(0, 0, 1) + nic(0, 4097, 1)
    yield 'state', u8(3 | (4 << 2) | (3 << 5)) + work + u8(11) + u8(12) + u16(16) + bytes(16) + u8(9) + u16(0x168) + u8(0) + u8(10) + u16(0x38) + u64(1) + u8(0)


HARNESSES = dict(switch_stage=switch_stage, vmbox=vmbox, packetizer=packetizer, cdma=cdma, gas=gas, rmc=rmc, r2p2=r2p2, bridge=bridge, port=port,
                 atomic_unit=atomic_unit, rnic=rnic, pmem=pmem)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, 'corpus')
    for name, gen in HARNESSES.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for seed, data in gen():
            with open(os.path.join(d, 'seed-' + seed), 'wb') as f:
                f.write(data)


if __name__ == '__main__':
    main()

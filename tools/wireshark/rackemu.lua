-- SPDX-License-Identifier: MIT
--
-- Wireshark/tshark dissector for rackemu's own fabric frames (docs/fabric.md, "Capture").
--
-- `rackemu capture` records them with link type DLT_USER0 (147): each record is one
-- struct rkf_frame_hdr (hw/include/rackemu/fabric_proto.h, 32 bytes, little-endian as on the
-- rings) followed by its payload. Ethernet frames (IP, ARP, RoCEv2) are recorded as DLT_EN10MB
-- and need nothing from this file.
--
--   tshark -X lua_script:tools/wireshark/rackemu.lua -r capture.pcapng
--   wireshark -X lua_script:tools/wireshark/rackemu.lua capture.pcapng
-- or copy it into ~/.local/lib/wireshark/plugins/.
--
-- The numbers below are fabric_proto.h's; a test (tests/unit/test_capture.cc) decodes a capture
-- with this file, so a change there that is not made here fails it.

local rkf = Proto("rackemu", "rackemu fabric frame")

local types = { [1] = "REQ", [2] = "REPLY", [3] = "MSG" }
local svcs = { [0] = "bridge", [1] = "unimem-mbox", [2] = "echo", [3] = "mem", [4] = "rmc", [5] = "eth" }
local statuses = { [0] = "OK", [1] = "REFUSED", [2] = "NOROUTE", [3] = "NODE_GONE", [4] = "CONGESTED",
                   [5] = "BAD_FRAME", [6] = "LINK_DOWN" }
local mem_ops = { [1] = "READ", [2] = "WRITE" }

local f = rkf.fields
f.magic = ProtoField.uint32("rackemu.magic", "Magic", base.HEX)
f.type = ProtoField.uint8("rackemu.type", "Type", base.DEC, types)
f.svc = ProtoField.uint8("rackemu.svc", "Service", base.DEC, svcs)
f.op = ProtoField.uint16("rackemu.op", "Operation", base.DEC)
f.src = ProtoField.uint16("rackemu.src", "Source node", base.DEC)
f.dst = ProtoField.uint16("rackemu.dst", "Destination node", base.DEC)
f.len = ProtoField.uint16("rackemu.len", "Payload length", base.DEC)
f.status = ProtoField.uint16("rackemu.status", "Status", base.DEC, statuses)
f.tag = ProtoField.uint64("rackemu.tag", "Tag", base.HEX)
f.ts = ProtoField.uint64("rackemu.ts_ns", "Sender time (ns, CLOCK_MONOTONIC)", base.DEC)
f.payload = ProtoField.bytes("rackemu.payload", "Payload")
f.mem_addr = ProtoField.uint64("rackemu.mem.addr", "Address", base.HEX)
f.mem_len = ProtoField.uint32("rackemu.mem.len", "Length", base.DEC)
f.mem_flags = ProtoField.uint32("rackemu.mem.flags", "Flags", base.HEX)
f.mbox_mif = ProtoField.uint32("rackemu.mbox.mif", "MIF", base.DEC)
f.mbox_nwords = ProtoField.uint32("rackemu.mbox.nwords", "Words", base.DEC)
f.mbox_word = ProtoField.uint64("rackemu.mbox.word", "Word", base.HEX)
f.eth_frame_len = ProtoField.uint16("rackemu.eth.frame_len", "Ethernet frame length", base.DEC)
f.eth_offset = ProtoField.uint16("rackemu.eth.offset", "Fragment offset", base.DEC)
f.eth_seq = ProtoField.uint32("rackemu.eth.frame_seq", "Frame sequence", base.DEC)

local RKF_FRAME_MAGIC = 0x524b4646

function rkf.dissector(buf, pinfo, tree)
    if buf:len() < 32 then return 0 end
    pinfo.cols.protocol = "rackemu"
    local t = tree:add(rkf, buf(0, 32), "rackemu fabric frame")
    local magic = buf(0, 4):le_uint()
    t:add_le(f.magic, buf(0, 4))
    if magic ~= RKF_FRAME_MAGIC then
        pinfo.cols.info = "not a rackemu frame (bad magic)"
        return buf:len()
    end
    local ty, svc, op = buf(4, 1):uint(), buf(5, 1):uint(), buf(6, 2):le_uint()
    local src, dst, len, status = buf(8, 2):le_uint(), buf(10, 2):le_uint(), buf(12, 2):le_uint(), buf(14, 2):le_uint()
    t:add_le(f.type, buf(4, 1))
    t:add_le(f.svc, buf(5, 1))
    t:add_le(f.op, buf(6, 2))
    t:add_le(f.src, buf(8, 2))
    t:add_le(f.dst, buf(10, 2))
    t:add_le(f.len, buf(12, 2))
    t:add_le(f.status, buf(14, 2))
    t:add_le(f.tag, buf(16, 8))
    t:add_le(f.ts, buf(24, 8))
    local info = string.format("%s %s op %d %d -> %d tag 0x%s", types[ty] or ("type " .. ty),
                               svcs[svc] or ("svc " .. svc), op, src, dst, buf(16, 8):le_uint64():tohex())
    if ty == 2 then info = info .. " " .. (statuses[status] or ("status " .. status)) end
    local avail = buf:len() - 32
    if len > 0 and avail > 0 then
        local p = buf(32, math.min(len, avail))
        local pt = t:add(f.payload, p)
        if svc == 3 and p:len() >= 16 then
            pt:add_le(f.mem_addr, p(0, 8))
            pt:add_le(f.mem_len, p(8, 4))
            pt:add_le(f.mem_flags, p(12, 4))
            info = info .. string.format(" %s 0x%s len %d", mem_ops[op] or "?", p(0, 8):le_uint64():tohex(),
                                         p(8, 4):le_uint())
        elseif svc == 1 and p:len() >= 8 then
            pt:add_le(f.mbox_mif, p(0, 4))
            pt:add_le(f.mbox_nwords, p(4, 4))
            local n = math.min(p(4, 4):le_uint(), 8, math.floor((p:len() - 8) / 8))
            for i = 0, n - 1 do pt:add_le(f.mbox_word, p(8 + 8 * i, 8)) end
        elseif svc == 5 and p:len() >= 8 then
            pt:add_le(f.eth_frame_len, p(0, 2))
            pt:add_le(f.eth_offset, p(2, 2))
            pt:add_le(f.eth_seq, p(4, 4))
        end
    end
    pinfo.cols.info = info
    return buf:len()
end

-- DLT_USER0 is Wireshark's WTAP_ENCAP_USER0 (45); the name of the table holding it changed
-- across Wireshark versions.
local encap = (wtap_encaps and wtap_encaps.USER0) or (wtap and wtap.USER0) or 45
DissectorTable.get("wtap_encap"):add(encap, rkf)

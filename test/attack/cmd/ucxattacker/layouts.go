package main

import (
	"encoding/binary"
	"fmt"
)

// The byte layouts the attacker writes, each written out here by hand from its documented form
// (velo/internal/wire, ucx/internal/capi/capi.h, UCX's own headers): an attacker has no velo
// client to call, and the suite must not lean on velo's encoders to attack velo.

// Active-message ids velo's UCX engine and transport listen on.
const (
	amVeloFrame  = 0x0760 // every frame of velo's UCX transport
	amGuardReq   = 0xFFF0 // the guarded GET request
	amGuardRep   = 0xFFF1 // its reply
	amGuardVReq  = 0xFFF2 // the vectored guarded GET request
	amGuardVRep  = 0xFFF3 // its reply
	guardMagic   = 0x56474731
	guardVMagic  = 0x56475631
	guardReqLen  = 40 // magic, slot, token, address, length, request id (native order)
	guardRepLen  = 16 // request id, status, magic
	guardVHdrLen = 16 // magic, count, request id
	guardVEntLen = 32 // slot, reserved, token, address, length
)

// guardRequest is velo_ucx_get_req_hdr_t (little-endian: the engine copies it as a C struct).
func guardRequest(r guardRead, reqID uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, guardMagic)
	b = binary.LittleEndian.AppendUint32(b, r.Slot)
	b = binary.LittleEndian.AppendUint64(b, r.Token)
	b = binary.LittleEndian.AppendUint64(b, r.Addr)
	b = binary.LittleEndian.AppendUint64(b, r.Len)
	return binary.LittleEndian.AppendUint64(b, reqID)
}

// guardVRequest is velo_ucx_getv_req_hdr_t followed by its entries.
func guardVRequest(reads []guardRead, reqID uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, guardVMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(reads)))
	b = binary.LittleEndian.AppendUint64(b, reqID)
	for _, r := range reads {
		b = binary.LittleEndian.AppendUint32(b, r.Slot)
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint64(b, r.Token)
		b = binary.LittleEndian.AppendUint64(b, r.Addr)
		b = binary.LittleEndian.AppendUint64(b, r.Len)
	}
	return b
}

// Velo's UCX transport frame header (big-endian): incarnation, sender ID, kind, flags, header
// flags, a reserved byte, epoch, seq. Since wire version 4, header flag 1 (sealed) says a seal
// follows the 32 bytes (version 5: an 8-byte nonce counter and a 16-byte GCM tag under a key of
// the endpoint, which only the two authenticated sides know). Version 3 has neither; its header
// flags byte is reserved and zero.
const (
	frameHeaderLen = 32
	sealLen        = 24
	headerSealed   = 1 << 0
	kindData       = 0
	kindHello      = 1
	kindFin        = 2
	finAsk         = 1 << 0
	finBye         = 1 << 1
)

// frameHeader is a header without a seal, or, given one, a sealed header with it.
func frameHeader(inc, sender uint64, kind, flags uint8, epoch uint32, seq uint64, seal []byte) []byte {
	var hflags byte
	if seal != nil {
		hflags = headerSealed
	}
	b := binary.BigEndian.AppendUint64(nil, inc)
	b = binary.BigEndian.AppendUint64(b, sender)
	b = append(b, kind, flags, hflags, 0)
	b = binary.BigEndian.AppendUint32(b, epoch)
	b = binary.BigEndian.AppendUint64(b, seq)
	return append(b, seal...)
}

func kindByName(s string) (uint8, error) {
	switch s {
	case "data":
		return kindData, nil
	case "hello":
		return kindHello, nil
	case "fin":
		return kindFin, nil
	}
	return 0, fmt.Errorf("frame kind %q: want data, hello or fin", s)
}

// oneWayMessage is a messenger frame (version 1) of a one-way message to handler name: version,
// kind 1, flags, reserved, request id 0, the name's length and the name, then the payload.
func oneWayMessage(name string, payload []byte) []byte {
	b := []byte{1, 1, 0, 0}
	b = binary.BigEndian.AppendUint64(b, 0)
	b = append(b, byte(len(name)))
	b = append(b, name...)
	return append(b, payload...)
}

// ucxBlobWorker takes the UCX worker address out of velo's published address blob, and the
// bytes that name the victim's UCX build (nil before version 6). Versions 3 to 5: version,
// flags, two reserved bytes, largest frame, incarnation, the address's length, the address, a
// CRC-32C. Version 6 puts the build after the incarnation: release (three bytes), the guard
// version's length and the guard version.
func ucxBlobWorker(blob []byte) (worker, build []byte, err error) {
	if len(blob) < 24 || blob[0] < 3 || blob[0] > 6 {
		return nil, nil, fmt.Errorf("not a velo UCX address blob of version 3 to 6 (%d bytes)", len(blob))
	}
	at := 16
	if blob[0] >= 6 {
		at = 20 + int(blob[19])
		if len(blob) < at+8 {
			return nil, nil, fmt.Errorf("velo UCX address blob: a build of %d bytes in %d", at-16, len(blob))
		}
		build = blob[16:at]
	}
	n := binary.BigEndian.Uint32(blob[at:])
	if uint64(n)+uint64(at)+8 != uint64(len(blob)) {
		return nil, nil, fmt.Errorf("velo UCX address blob: a worker address of %d bytes in %d", n, len(blob))
	}
	return blob[at+4 : at+4+int(n)], build, nil
}

// helloBody is a hello's body with a proof slot: the previous epoch, 32 proof bytes, then an
// address blob of the given version naming the impersonated incarnation, the victim's own UCX
// build (so that the build check lets it by) and the attacker's worker (a hello that got through
// would send the peer's traffic to the attacker).
func helloBody(prevEpoch uint32, proof []byte, version byte, inc uint64, build, worker []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, prevEpoch)
	b = append(b, proof...)
	blob := []byte{version, 1, 0, 0}
	blob = binary.BigEndian.AppendUint32(blob, 1<<20)
	blob = binary.BigEndian.AppendUint64(blob, inc)
	blob = append(blob, build...)
	blob = binary.BigEndian.AppendUint32(blob, uint32(len(worker)))
	blob = append(blob, worker...)
	blob = binary.BigEndian.AppendUint32(blob, crc32c(blob))
	return append(b, blob...)
}

// UCX's tcp transport (src/uct/tcp/tcp.h, the same in 1.13 and 1.22): every message is an
// active-message header (a one-byte id, a 32-bit length, packed, native order) and that many
// bytes; ids at and above 32 are the transport's own.
const (
	tcpMagic       = 0xCAFEBABE12345678
	tcpAMHdrLen    = 5
	tcpAMConnMgmt  = 32 // UCT_TCP_EP_CM_AM_ID
	tcpAMPutReq    = 33 // UCT_TCP_EP_PUT_REQ_AM_ID
	tcpAMPutAck    = 34
	tcpAMKeepalive = 35
	tcpConnReq     = 1 // UCT_TCP_CM_CONN_REQ
	tcpConnAck     = 2
	tcpPutReqLen   = 20 // address, length, sequence number
)

func tcpAM(id uint8, body []byte) []byte {
	b := []byte{id}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

// tcpConnRequest is the first thing a tcp endpoint sends: the magic number, then a connection
// request naming its connection sequence number and the interface address it claims.
func tcpConnRequest(connSN uint64, sockaddr []byte) []byte {
	body := binary.LittleEndian.AppendUint32(nil, tcpConnReq)
	body = append(body, 0) // flags: not CONNECT_TO_EP
	body = binary.LittleEndian.AppendUint64(body, connSN)
	body = append(body, sockaddr...)
	return append(binary.LittleEndian.AppendUint64(nil, tcpMagic), tcpAM(tcpAMConnMgmt, body)...)
}

// tcpPutRequest is the tcp transport's PUT: a header naming the target address, the length
// and a sequence number; the data follows the message, outside its length.
func tcpPutRequest(addr uint64, data []byte, sn uint32) []byte {
	body := binary.LittleEndian.AppendUint64(nil, addr)
	body = binary.LittleEndian.AppendUint64(body, uint64(len(data)))
	body = binary.LittleEndian.AppendUint32(body, sn)
	return append(tcpAM(tcpAMPutReq, body), data...)
}

// ucp's software RMA messages (src/ucp/rma/rma.h, src/ucp/core/ucp_types.h; the same in 1.13 and
// 1.22), sent as UCT active messages with ucp's ids.
const (
	ucpAMPut       = 17
	ucpAMGetReq    = 18
	ucpAMAtomicReq = 20
	ucsMemoryHost  = 0
)

func ucpPut(addr, epID uint64, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, addr)
	b = binary.LittleEndian.AppendUint64(b, epID)
	b = binary.LittleEndian.AppendUint32(b, ucsMemoryHost)
	return append(b, data...)
}

func ucpGetReq(addr, length, epID, reqID uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, addr)
	b = binary.LittleEndian.AppendUint64(b, length)
	b = binary.LittleEndian.AppendUint64(b, epID)
	b = binary.LittleEndian.AppendUint64(b, reqID)
	return binary.LittleEndian.AppendUint32(b, ucsMemoryHost)
}

// ucpAtomicReq is a 64-bit atomic add of value (opcode 0, UCT_ATOMIC_OP_ADD).
func ucpAtomicReq(addr, epID, reqID, value uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, addr)
	b = binary.LittleEndian.AppendUint64(b, epID)
	b = binary.LittleEndian.AppendUint64(b, reqID)
	b = append(b, 8, 0)
	return binary.LittleEndian.AppendUint64(b, value)
}

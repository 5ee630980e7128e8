package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ucx"
)

// velo's guarded PUT (ucx/internal/capi/capi.h, velo_ucx_put_req_hdr_t and velo_ucx_put_rep_hdr_t,
// little-endian), written out by hand: a request is the header and then the bytes, eager; the
// answer is the header alone. The vectored form (velo_ucx_putv_req_hdr_t): a header, an entry per
// write (the vectored GET's), the writes' bytes back to back; its answer a header and a status per
// entry.
const (
	amGuardPutReq   = 0xFFF4
	amGuardPutRep   = 0xFFF5
	amGuardPutVReq  = 0xFFF6
	amGuardPutVRep  = 0xFFF7
	guardPutMagic   = 0x56475031
	guardPutVMagic  = 0x56505631
	guardPutRepLen  = 16 // request id, status, magic
	guardPutVRepLen = 16 // request id, magic, count; then a status per entry
)

// guardPutVRequest is the vectored request's header: the GET's layout with the PUT's magic.
func guardPutVRequest(writes []guardRead, reqID uint64) []byte {
	b := guardVRequest(writes, reqID)
	binary.LittleEndian.PutUint32(b, guardPutVMagic)
	return b
}

func guardPutRequest(w guardRead, reqID uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, guardPutMagic)
	b = binary.LittleEndian.AppendUint32(b, w.Slot)
	b = binary.LittleEndian.AppendUint64(b, w.Token)
	b = binary.LittleEndian.AppendUint64(b, w.Addr)
	b = binary.LittleEndian.AppendUint64(b, w.Len)
	return binary.LittleEndian.AppendUint64(b, reqID)
}

// putReplies are the answers to guarded PUT requests, by request id (the status, or for a
// vectored request the statuses); putHandler says the worker listens for them.
var (
	putReplies = map[uint64][]int32{}
	putHandler bool
)

// guardedPut sends one guarded PUT request by hand: the header of the command's one "read"
// (slot, token, address, length: a write names its range the way a read does), or with vectored
// the vectored header of all of them, then the command's data, eagerly, or by rendezvous with
// "rndv". It answers "replied" and the status ("statuses" for a vectored request).
func (a *attacker) guardedPut(c cmd, vectored bool, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	if !vectored && len(c.Reads) != 1 {
		return nil, errors.New("guarded_put: one write in reads (slot, token, addr, len)")
	}
	data, err := hex.DecodeString(c.Data)
	if err != nil {
		return nil, fmt.Errorf("guarded_put: data: %w", err)
	}
	if !putHandler {
		for _, id := range []uint16{amGuardPutRep, amGuardPutVRep} {
			if err := a.w.SetAMHandler(id); err != nil {
				return nil, err
			}
		}
		putHandler = true
	}
	a.nextReq++
	id := a.nextReq
	var hdr []byte
	am := uint16(amGuardPutReq)
	if vectored {
		hdr, am = guardPutVRequest(c.Reads, id), amGuardPutVReq
	} else {
		hdr = guardPutRequest(c.Reads[0], id)
	}
	// Header and data must outlive the send: registered memory.
	buf := a.mem.Bytes()[:len(hdr)+len(data)]
	copy(buf, hdr)
	copy(buf[len(hdr):], data)
	flags := ucx.AMReply | ucx.AMEager
	if c.Rndv {
		flags = ucx.AMReply | ucx.AMRendezvous
	}
	req, err := a.ep.SendAM(am, buf[:len(hdr)], buf[len(hdr):], flags)
	if err != nil {
		return a.outcome(err), nil
	}
	// The answer may come before the send completes (a rendezvous send completes only once the
	// target let go of the data): watch for both.
	poll := func(ev *ucx.Event) {
		if ev.Kind == ucx.EventAM && ev.AM.ID == amGuardPutRep {
			if h := ev.AM.Header; len(h) == guardPutRepLen && binary.LittleEndian.Uint32(h[12:]) == guardPutMagic {
				putReplies[binary.LittleEndian.Uint64(h)] = []int32{int32(binary.LittleEndian.Uint32(h[8:]))}
			}
			return
		}
		if ev.Kind == ucx.EventAM && ev.AM.ID == amGuardPutVRep {
			h := ev.AM.Header
			if len(h) >= guardPutVRepLen && binary.LittleEndian.Uint32(h[8:]) == guardPutVMagic {
				n := int(binary.LittleEndian.Uint32(h[12:]))
				if len(h) == guardPutVRepLen+4*n {
					st := make([]int32, n)
					for j := range st {
						st[j] = int32(binary.LittleEndian.Uint32(h[guardPutVRepLen+4*j:]))
					}
					putReplies[binary.LittleEndian.Uint64(h)] = st
				}
			}
			return
		}
		a.onEvent(ev)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && a.ep.Err() == nil {
		if _, ok := putReplies[id]; ok && (req == nil || req.Done()) {
			break
		}
		a.w.Progress()
		a.w.Poll(poll)
	}
	var sendErr error
	if req != nil && !req.Done() {
		req.Cancel()
		for end := time.Now().Add(time.Second); !req.Done() && time.Now().Before(end); {
			a.w.Progress()
			a.w.Poll(poll)
		}
		sendErr = errTimeout
	} else if req != nil {
		sendErr = req.Err()
	}
	statuses, replied := putReplies[id]
	delete(putReplies, id)
	m := a.outcome(sendErr)
	m["replied"] = replied
	if replied {
		m["reply_status"] = statuses[0]
		m["statuses"] = statuses
	}
	return m, nil
}

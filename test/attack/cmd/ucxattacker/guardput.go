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
// answer is the header alone.
const (
	amGuardPutReq  = 0xFFF4
	amGuardPutRep  = 0xFFF5
	guardPutMagic  = 0x56475031
	guardPutRepLen = 16 // request id, status, magic
)

func guardPutRequest(w guardRead, reqID uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, guardPutMagic)
	b = binary.LittleEndian.AppendUint32(b, w.Slot)
	b = binary.LittleEndian.AppendUint64(b, w.Token)
	b = binary.LittleEndian.AppendUint64(b, w.Addr)
	b = binary.LittleEndian.AppendUint64(b, w.Len)
	return binary.LittleEndian.AppendUint64(b, reqID)
}

// putReplies are the answers to guarded PUT requests, by request id; putHandler says the worker
// listens for them.
var (
	putReplies = map[uint64]int32{}
	putHandler bool
)

// guardedPut sends one guarded PUT request by hand: the header of the command's one "read"
// (slot, token, address, length: a write names its range the way a read does), then the
// command's data, eagerly, or by rendezvous with "rndv". It answers "replied" and the status.
func (a *attacker) guardedPut(c cmd, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	if len(c.Reads) != 1 {
		return nil, errors.New("guarded_put: one write in reads (slot, token, addr, len)")
	}
	data, err := hex.DecodeString(c.Data)
	if err != nil {
		return nil, fmt.Errorf("guarded_put: data: %w", err)
	}
	if !putHandler {
		if err := a.w.SetAMHandler(amGuardPutRep); err != nil {
			return nil, err
		}
		putHandler = true
	}
	a.nextReq++
	id := a.nextReq
	hdr := guardPutRequest(c.Reads[0], id)
	// Header and data must outlive the send: registered memory.
	buf := a.mem.Bytes()[:len(hdr)+len(data)]
	copy(buf, hdr)
	copy(buf[len(hdr):], data)
	flags := ucx.AMReply | ucx.AMEager
	if c.Rndv {
		flags = ucx.AMReply | ucx.AMRendezvous
	}
	req, err := a.ep.SendAM(amGuardPutReq, buf[:len(hdr)], buf[len(hdr):], flags)
	if err != nil {
		return a.outcome(err), nil
	}
	// The answer may come before the send completes (a rendezvous send completes only once the
	// target let go of the data): watch for both.
	poll := func(ev *ucx.Event) {
		if ev.Kind == ucx.EventAM && ev.AM.ID == amGuardPutRep {
			if h := ev.AM.Header; len(h) == guardPutRepLen && binary.LittleEndian.Uint32(h[12:]) == guardPutMagic {
				putReplies[binary.LittleEndian.Uint64(h)] = int32(binary.LittleEndian.Uint32(h[8:]))
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
	status, replied := putReplies[id]
	delete(putReplies, id)
	m := a.outcome(sendErr)
	m["replied"] = replied
	if replied {
		m["reply_status"] = status
	}
	return m, nil
}

package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"strconv"
	"time"

	"github.com/velo-go/velo/ucx"
)

// attacker holds the UCP side of the attack: its own context, worker and endpoint to the
// victim's worker, memory of its own (and the key packed from it), and the replies to its
// guarded GET requests.
type attacker struct {
	ctx    *ucx.Context
	w      *ucx.Worker
	ep     *ucx.Endpoint
	worker []byte // the victim's worker address
	// blobVersion is the velo wire version of the victim's address blob (3, 4 with sealed
	// frames, 6 with the UCX build).
	blobVersion byte
	build       []byte // the victim's UCX build as its blob names it (version 6)
	addr        []byte // this worker's address
	mem         *ucx.Memory
	mh          *ucx.MemHandle
	ownKey      []byte
	keys        map[string]*ucx.RemoteKey // unpacked on ep, by the packed key's hex

	amo *amoSide // the atomics' own context and endpoint, opened at the first atomic

	flooded []net.Conn // the connection flood's connections, held until flood_release
	planted []*planted // planted connection requests, held until plant_release

	nextReq   uint64
	replies   map[uint64]*guardReply
	epFailure string // the endpoint's failure, if UCX reported one

	obs *observer
}

type guardReply struct {
	status   int32
	statuses []int32
	data     []byte
	rndv     int // bytes announced by rendezvous (not received)
}

// scratch is where reads land and writes come from: registered, mmap'd memory that UCX may
// use after a call returns.
const scratchLen = 1 << 20

// atomicArea is where in scratch the atomics' operands and results live (64 of them at most).
const atomicArea = scratchLen - 1024

func (a *attacker) connect(c cmd) (map[string]any, error) {
	blob, err := hex.DecodeString(c.Blob)
	if err != nil {
		return nil, fmt.Errorf("connect: blob: %w", err)
	}
	worker, build, err := ucxBlobWorker(blob)
	if err != nil {
		return nil, err
	}
	if a.ctx == nil {
		// Atomics need their feature in the context; everything else is UCX's default set.
		a.ctx, err = ucx.NewContext(ucx.ContextConfig{TLS: "tcp", Features: ucx.FeatureAM | ucx.FeatureRMA | ucx.FeatureAMO})
		if err != nil {
			return nil, err
		}
		if a.w, err = a.ctx.NewWorker(); err != nil {
			return nil, err
		}
		for _, id := range []uint16{amGuardRep, amGuardVRep} {
			if err := a.w.SetAMHandler(id); err != nil {
				return nil, err
			}
		}
		if a.addr, err = a.w.Address(); err != nil {
			return nil, err
		}
		if a.mem, err = ucx.AllocMemory(scratchLen, ucx.MemoryOptions{}); err != nil {
			return nil, err
		}
		if a.mh, err = a.ctx.MapMemory(a.mem.Bytes()); err != nil {
			return nil, err
		}
		if a.ownKey, err = a.mh.PackRemoteKey(); err != nil {
			return nil, err
		}
		a.replies = map[uint64]*guardReply{}
	}
	a.worker = append([]byte(nil), worker...)
	a.blobVersion = blob[0]
	a.build = append([]byte(nil), build...)
	if err := a.reconnect(); err != nil {
		return nil, err
	}
	if a.obs != nil {
		// This process listens on UCX ports of its own now: the observer must see them too.
		if _, err := a.obs.filter(); err != nil {
			return nil, err
		}
	}
	return map[string]any{"ok": true, "ucx_version": ucx.Version().String, "own_key": hex.EncodeToString(a.ownKey)}, nil
}

// reconnect opens a fresh endpoint to the victim (the first, or after the last one failed).
func (a *attacker) reconnect() error {
	a.dropEndpoint()
	ep, err := a.w.Connect(a.worker, ucx.EndpointOptions{})
	if err != nil {
		return err
	}
	a.ep, a.keys, a.epFailure = ep, map[string]*ucx.RemoteKey{}, ""
	return nil
}

func (a *attacker) dropEndpoint() {
	if a.ep == nil {
		return
	}
	for _, k := range a.keys {
		k.Destroy()
	}
	if r, _ := a.ep.Close(ucx.CloseForce); r != nil {
		_ = a.wait(r, 5*time.Second)
	}
	a.ep = nil
}

func (a *attacker) close() {
	if a.w == nil {
		return
	}
	if a.amo != nil {
		a.amo.close()
	}
	a.dropEndpoint()
	if a.mh != nil {
		_ = a.mh.Unmap()
	}
	a.w.Close()
	a.ctx.Close()
	if a.mem != nil {
		a.mem.Free()
	}
}

// ready makes sure there is a usable endpoint: UCX fails one whose request the victim
// answered with an error (a refused RMA can do that), and the attack goes on with a new one.
func (a *attacker) ready() error {
	if a.ep == nil {
		return errors.New("not connected: send connect first")
	}
	if a.ep.Err() != nil {
		return a.reconnect()
	}
	return nil
}

func (a *attacker) progress() {
	a.w.Progress()
	a.w.Poll(a.onEvent)
	if m := a.amo; m != nil {
		m.w.Progress()
		m.w.Poll(func(ev *ucx.Event) {
			if ev.Kind == ucx.EventEndpointError && ev.Endpoint == m.ep && ev.Err != nil {
				m.failure = ev.Err.Error()
			}
		})
	}
}

// amoSide is a second context, worker and endpoint to the victim that the attacker sends its
// atomics on. UCX 1.22's protocol selection finds no atomic protocol toward a worker whose
// context did not ask for atomics (velo's do not), and the attacker's own UCX then asserts and
// aborts in its error path before anything is sent; with UCX's earlier protocols
// (UCX_PROTO_ENABLE=n, this context only) the atomic goes out as a software request, which is
// what the attack is about. On 1.13 those protocols are the default anyway.
type amoSide struct {
	ctx     *ucx.Context
	w       *ucx.Worker
	ep      *ucx.Endpoint
	keys    map[string]*ucx.RemoteKey
	failure string
}

// amoReady returns the atomics' endpoint, opening (or reopening) it as needed.
func (a *attacker) amoReady() (*amoSide, error) {
	if a.amo == nil {
		settings := map[string]string{}
		if v := ucx.Version(); v.Major > 1 || v.Minor > 13 {
			settings["PROTO_ENABLE"] = "n"
		}
		ctx, err := ucx.NewContext(ucx.ContextConfig{TLS: "tcp", Features: ucx.FeatureAM | ucx.FeatureRMA | ucx.FeatureAMO, Settings: settings})
		if err != nil {
			return nil, err
		}
		w, err := ctx.NewWorker()
		if err != nil {
			ctx.Close()
			return nil, err
		}
		a.amo = &amoSide{ctx: ctx, w: w}
	}
	m := a.amo
	if m.ep != nil && m.ep.Err() == nil {
		return m, nil
	}
	if m.ep != nil {
		for _, k := range m.keys {
			k.Destroy()
		}
		if r, _ := m.ep.Close(ucx.CloseForce); r != nil {
			_ = a.wait(r, 5*time.Second)
		}
	}
	ep, err := m.w.Connect(a.worker, ucx.EndpointOptions{})
	if err != nil {
		return nil, err
	}
	m.ep, m.keys, m.failure = ep, map[string]*ucx.RemoteKey{}, ""
	return m, nil
}

func (m *amoSide) key(spec string, own []byte) (*ucx.RemoteKey, error) {
	packed := own
	if spec != "own" && spec != "" {
		var err error
		if packed, err = hex.DecodeString(spec); err != nil {
			return nil, fmt.Errorf("key %q: %w", spec, err)
		}
	}
	h := hex.EncodeToString(packed)
	if k := m.keys[h]; k != nil {
		return k, nil
	}
	k, err := m.ep.UnpackRemoteKey(packed)
	if err != nil {
		return nil, err
	}
	m.keys[h] = k
	return k, nil
}

func (m *amoSide) close() {
	if m.ep != nil {
		for _, k := range m.keys {
			k.Destroy()
		}
		m.ep.Close(ucx.CloseForce)
	}
	m.w.Close()
	m.ctx.Close()
}

func (a *attacker) onEvent(ev *ucx.Event) {
	switch ev.Kind {
	case ucx.EventEndpointError:
		if ev.Endpoint == a.ep && ev.Err != nil {
			a.epFailure = ev.Err.Error()
		}
	case ucx.EventAM:
		am := ev.AM
		switch am.ID {
		case amGuardRep:
			if len(am.Header) != guardRepLen {
				return
			}
			id := binary.LittleEndian.Uint64(am.Header)
			r := &guardReply{status: int32(binary.LittleEndian.Uint32(am.Header[8:]))}
			a.keepData(r, am)
			a.replies[id] = r
		case amGuardVRep:
			if len(am.Header) < guardVHdrLen {
				return
			}
			id := binary.LittleEndian.Uint64(am.Header)
			n := int(binary.LittleEndian.Uint32(am.Header[12:]))
			r := &guardReply{}
			for i := 0; i < n && guardVHdrLen+4*i+4 <= len(am.Header); i++ {
				r.statuses = append(r.statuses, int32(binary.LittleEndian.Uint32(am.Header[guardVHdrLen+4*i:])))
			}
			a.keepData(r, am)
			a.replies[id] = r
		}
	}
}

func (a *attacker) keepData(r *guardReply, am *ucx.AMEvent) {
	if am.Rendezvous {
		r.rndv = am.Length
		return
	}
	r.data = append([]byte(nil), am.Data...)
}

var errTimeout = errors.New("no completion within the timeout")

// wait progresses until req completes; a request still running at the timeout is cancelled.
func (a *attacker) wait(req *ucx.Request, timeout time.Duration) error {
	if req == nil {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for !req.Done() {
		if time.Now().After(deadline) {
			req.Cancel()
			for end := time.Now().Add(time.Second); !req.Done() && time.Now().Before(end); {
				a.progress()
			}
			return errTimeout
		}
		a.progress()
	}
	return req.Err()
}

// key returns the remote key the command names, unpacked on the endpoint.
func (a *attacker) key(spec string) (*ucx.RemoteKey, error) {
	packed := a.ownKey
	if spec != "own" && spec != "" {
		var err error
		if packed, err = hex.DecodeString(spec); err != nil {
			return nil, fmt.Errorf("key %q: %w", spec, err)
		}
	}
	h := hex.EncodeToString(packed)
	if k := a.keys[h]; k != nil {
		return k, nil
	}
	k, err := a.ep.UnpackRemoteKey(packed)
	if err != nil {
		return nil, err
	}
	a.keys[h] = k
	return k, nil
}

// outcome is the JSON of one RMA attempt: the status UCX gave it, and whether the endpoint
// failed with it.
func (a *attacker) outcome(err error) map[string]any {
	m := map[string]any{"status": "ok"}
	if err != nil {
		m["status"] = err.Error()
	}
	if a.epFailure != "" {
		m["endpoint_failed"] = a.epFailure
	}
	return m
}

// get reads len bytes at addr into memory pre-filled with 0xEE: "data" is what arrived (only
// when UCX reported success), "changed" whether any byte of the destination changed at all.
func (a *attacker) get(c cmd, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	if c.Len == 0 || c.Len > atomicArea {
		return nil, fmt.Errorf("get: length %d outside 1..%d", c.Len, atomicArea)
	}
	rk, err := a.key(c.Key)
	if err != nil {
		return map[string]any{"status": "key refused: " + err.Error()}, nil
	}
	dst := a.mem.Bytes()[:c.Len]
	fill(dst, 0xEE)
	req, err := a.ep.Get(dst, c.Addr, rk)
	if err == nil {
		err = a.wait(req, timeout)
	}
	m := a.outcome(err)
	m["changed"] = !allBytes(dst, 0xEE)
	if err == nil {
		m["data"] = hex.EncodeToString(dst)
	}
	return m, nil
}

// put writes data at addr and flushes the endpoint (so the write reached the target).
func (a *attacker) put(c cmd, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	data, err := hex.DecodeString(c.Data)
	if err != nil || len(data) == 0 || len(data) > atomicArea {
		return nil, fmt.Errorf("put: data: want 1..%d bytes of hex", atomicArea)
	}
	rk, err := a.key(c.Key)
	if err != nil {
		return map[string]any{"status": "key refused: " + err.Error()}, nil
	}
	src := a.mem.Bytes()[:len(data)]
	copy(src, data)
	req, err := a.ep.Put(src, c.Addr, rk)
	if err == nil {
		err = a.wait(req, timeout)
	}
	m := a.outcome(err)
	if a.ep.Err() == nil {
		f, ferr := a.ep.Flush()
		if ferr == nil {
			ferr = a.wait(f, timeout)
		}
		m["flush"] = "ok"
		if ferr != nil {
			m["flush"] = ferr.Error()
		}
	}
	return m, nil
}

var atomicOps = map[string]ucx.AtomicOp{
	"add": ucx.AtomicAdd, "swap": ucx.AtomicSwap, "cswap": ucx.AtomicCSwap,
	"and": ucx.AtomicAnd, "or": ucx.AtomicOr, "xor": ucx.AtomicXor,
}

// atomic posts one fetching 64-bit atomic at addr for each of c.Atomics, all before waiting
// for any (a target that drops them costs one timeout, not one per operation). Each answer has
// the operation's status and, when UCX reported success, the word it fetched.
func (a *attacker) atomic(c cmd, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	side, err := a.amoReady()
	if err != nil {
		return nil, err
	}
	rk, err := side.key(c.Key, a.ownKey)
	if err != nil {
		return map[string]any{"status": "key refused: " + err.Error()}, nil
	}
	type posted struct {
		op     string
		req    *ucx.Request
		err    error
		result []byte
	}
	if len(c.Atomics) == 0 || len(c.Atomics) > 64 {
		return nil, errors.New("atomic: 1..64 operations")
	}
	var ops []posted
	for i, name := range c.Atomics {
		op, ok := atomicOps[name]
		if !ok {
			return nil, fmt.Errorf("atomic %q: want add, swap, cswap, and, or or xor", name)
		}
		// Apart from the buffers of reads: a request that never completes may still write its
		// result there later.
		buf := a.mem.Bytes()[atomicArea+16*i : atomicArea+16*i+16]
		operand, result := buf[:8], buf[8:]
		binary.LittleEndian.PutUint64(operand, c.Value)
		fill(result, 0xEE) // a compare-and-swap stores these bytes where the word equals operand
		req, err := side.ep.Atomic(op, operand, result, c.Addr, rk)
		ops = append(ops, posted{op: name, req: req, err: err, result: result})
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pending := false
		for _, p := range ops {
			pending = pending || (p.err == nil && p.req != nil && !p.req.Done())
		}
		if !pending {
			break
		}
		a.progress()
	}
	out := map[string]any{}
	for _, p := range ops {
		if p.err == nil && p.req != nil {
			if p.req.Done() {
				p.err = p.req.Err()
			} else {
				// UCX cannot cancel an RMA in flight: it stays posted, and is reported as
				// not completed.
				p.req.Cancel()
				p.err = errTimeout
			}
		}
		m := map[string]any{"status": "ok"}
		if p.err != nil {
			m["status"] = p.err.Error()
		}
		if side.failure != "" {
			m["endpoint_failed"] = side.failure
		}
		if p.err == nil {
			m["fetched"] = hex.EncodeToString(p.result)
		}
		out[p.op] = m
	}
	return map[string]any{"ops": out}, nil
}

// guardedGet sends velo's guarded GET request by hand, single or vectored, and waits for its
// reply: "replied", the status (or statuses), and the bytes that came back.
func (a *attacker) guardedGet(c cmd, vectored bool, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	if len(c.Reads) == 0 || (!vectored && len(c.Reads) != 1) {
		return nil, errors.New("guarded_get: one read (guarded_getv: one or more)")
	}
	a.nextReq++
	id := a.nextReq
	var hdr []byte
	am := uint16(amGuardReq)
	if vectored {
		hdr, am = guardVRequest(c.Reads, id), amGuardVReq
	} else {
		hdr = guardRequest(c.Reads[0], id)
	}
	// The header must outlive the send: registered memory.
	buf := a.mem.Bytes()[:len(hdr)]
	copy(buf, hdr)
	req, err := a.ep.SendAM(am, buf, nil, ucx.AMReply|ucx.AMEager)
	if err == nil {
		err = a.wait(req, timeout)
	}
	if err != nil {
		return a.outcome(err), nil
	}
	deadline := time.Now().Add(timeout)
	for a.replies[id] == nil && time.Now().Before(deadline) && a.ep.Err() == nil {
		a.progress()
	}
	r := a.replies[id]
	delete(a.replies, id)
	m := a.outcome(nil)
	m["replied"] = r != nil
	if r != nil {
		m["reply_status"] = r.status
		m["statuses"] = r.statuses
		m["data"] = hex.EncodeToString(r.data)
		m["data_len"] = len(r.data) + r.rndv
	}
	return m, nil
}

// forge sends velo transport frames in another peer's name on the attacker's own endpoint.
func (a *attacker) forge(c cmd, timeout time.Duration) (map[string]any, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	inc, err1 := strconv.ParseUint(c.Inc, 16, 64)
	sender, err2 := strconv.ParseUint(c.Sender, 16, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("forge: sender and inc in hex: %w", err)
	}
	sent := 0
	var failures []string
	for _, f := range c.Frames {
		kind, err := kindByName(f.Kind)
		if err != nil {
			return nil, err
		}
		var body []byte
		switch kind {
		case kindData:
			body = oneWayMessage("attack.sink", []byte(f.Payload))
		case kindHello:
			proof := make([]byte, 32)
			_, _ = rand.Read(proof)
			body = helloBody(f.Epoch-1, proof, a.blobVersion, inc, a.build, a.addr)
		}
		var seal []byte
		if f.Sealed {
			seal = make([]byte, sealLen)
			_, _ = rand.Read(seal)
		}
		hdr := frameHeader(inc, sender, kind, f.Flags, f.Epoch, f.Seq, seal)
		msg := a.mem.Bytes()[:len(hdr)+len(body)]
		copy(msg, hdr)
		copy(msg[len(hdr):], body)
		req, err := a.ep.SendAM(amVeloFrame, msg[:len(hdr)], msg[len(hdr):], ucx.AMEager)
		if err == nil {
			err = a.wait(req, timeout)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s epoch %d seq %d: %v", f.Kind, f.Epoch, f.Seq, err))
			if a.ep.Err() != nil {
				if err := a.reconnect(); err != nil {
					return nil, err
				}
			}
			continue
		}
		sent++
	}
	if f, err := a.ep.Flush(); err == nil {
		_ = a.wait(f, timeout)
	}
	return map[string]any{"sent": sent, "failures": failures}, nil
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

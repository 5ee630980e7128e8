package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// Every decoder gets a fuzz target with the same contract: it never panics, every failure wraps
// ErrMalformed, and whatever it accepts re-encodes to bytes that decode to the same value. The seeds
// below and the files under testdata/fuzz run as ordinary tests (go test), so the contract is
// checked on every run, not only while fuzzing.

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrMalformed) {
		t.Fatalf("decode error does not wrap ErrMalformed: %v", err)
	}
}

func mustHello(t testing.TB, h Hello) []byte {
	b, err := AppendHello(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeHello(f *testing.F) {
	addr, _ := EncodeTCPAddr("127.0.0.1:7000")
	f.Add(mustHello(f, Hello{Version: HelloVersion, ID: 1, Incarnation: 2, MaxFrame: 1 << 20, Addr: addr}))
	f.Add(mustHello(f, Hello{Version: HelloVersion, ID: ^uint64(0), Incarnation: 0, MaxFrame: 0}))
	f.Add(mustHello(f, Hello{Version: 9, ID: 1}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHello(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		h2, err := DecodeHello(mustHello(t, h))
		if err != nil || !reflect.DeepEqual(h, h2) {
			t.Fatalf("round trip: %+v -> %+v, %v", h, h2, err)
		}
	})
}

func FuzzDecodeTCPAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:1", "[::1]:65535", "node-7.cluster:4242"} {
		b, err := EncodeTCPAddr(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{TCPAddrVersion, 5, 'h', 'o', 's', 't', ':'})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeTCPAddr(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		enc, err := EncodeTCPAddr(s)
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("round trip of %q: %x vs %x (%v)", s, enc, b, err)
		}
	})
}

// FuzzDecodeTCPControl: besides the common contract, an accepted body re-encodes, after its
// length word, to exactly the bytes read, and that length word says a control frame of that size.
func FuzzDecodeTCPControl(f *testing.F) {
	for _, c := range []TCPControl{{Kind: TCPGoodbye, Frames: 41}, {Kind: TCPGoodbyeAck}, {Kind: TCPGoodbyeKeep}} {
		f.Add(AppendTCPControl(nil, c)[4:])
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{TCPGoodbye, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeTCPControl(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		enc := AppendTCPControl(nil, c)
		if word := binary.BigEndian.Uint32(enc); word&TCPControlBit == 0 || int(word&^TCPControlBit) != len(enc)-4 || len(enc)-4 > TCPControlMaxLen {
			t.Fatalf("length word %08x for a body of %d bytes", word, len(enc)-4)
		}
		if !bytes.Equal(enc[4:], b) {
			t.Fatalf("round trip of %+v: %x vs %x", c, enc[4:], b)
		}
	})
}

func encodeMessage(t testing.TB, m Message) []byte {
	switch m.Kind {
	case KindOneWay, KindRequest:
		b, err := AppendCallHeader(nil, m.Header, m.Name)
		if err != nil {
			t.Fatal(err)
		}
		return append(b, m.Payload...)
	case KindResponse:
		return append(AppendHeader(nil, m.Header), m.Payload...)
	default:
		return AppendErrorBody(AppendHeader(nil, m.Header), m.Err)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add(encodeMessage(f, Message{Header: Header{Kind: KindOneWay}, Name: "greet", Payload: []byte("hi")}))
	f.Add(encodeMessage(f, Message{Header: Header{Kind: KindRequest, ID: 7}, Name: "echo", Payload: nil}))
	f.Add(encodeMessage(f, Message{Header: Header{Kind: KindRequest, ID: 8, Flags: FlagStaged}, Name: "big",
		Payload: AppendHandle(nil, Handle{Owner: 1, Slot: 2, Nonce: 3, Size: 4 << 20})}))
	f.Add(encodeMessage(f, Message{Header: Header{Kind: KindResponse, ID: 7}, Payload: []byte("pong")}))
	f.Add(encodeMessage(f, Message{Header: Header{Kind: KindError, ID: 9},
		Err: ErrorBody{Code: CodeHandlerPanic, Kind: "x.y", Text: "boom"}}))
	f.Add([]byte{MessageVersion, byte(KindOneWay), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		m2, err := DecodeMessage(encodeMessage(t, m))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if m.Header != m2.Header || m.Name != m2.Name || !bytes.Equal(m.Payload, m2.Payload) || m.Err != m2.Err {
			t.Fatalf("round trip: %+v -> %+v", m, m2)
		}
	})
}

func FuzzDecodePeerInfo(f *testing.F) {
	addr, _ := EncodeTCPAddr("10.0.0.1:9000")
	for _, p := range []PeerInfo{
		{ID: 1, Incarnation: 2, Addrs: []PeerAddr{{Transport: "tcp", Blob: addr}}},
		{ID: 3, Incarnation: 4, Addrs: []PeerAddr{{Transport: "tcp", Blob: addr}, {Transport: "ucx", Blob: []byte{2, 1, 2, 3}}}},
		{ID: 5},
	} {
		b, err := AppendPeerInfo(nil, p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePeerInfo(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		enc, err := AppendPeerInfo(nil, p)
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("round trip: %x vs %x (%v)", enc, b, err)
		}
	})
}

// fuzzFixed builds a fuzz body for decoders whose re-encoding must reproduce the input exactly.
func fuzzFixed[T any](decode func([]byte) (T, error), encode func(T) ([]byte, error)) func(*testing.T, []byte) {
	return func(t *testing.T, b []byte) {
		v, err := decode(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		enc, err := encode(v)
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("round trip of %+v: %x vs %x (%v)", v, enc, b, err)
		}
	}
}

func FuzzDecodeHandle(f *testing.F) {
	f.Add(AppendHandle(nil, Handle{Owner: 1, Slot: 1, Nonce: 0xdeadbeef, Size: 1}))
	f.Add(AppendHandle(nil, Handle{Owner: 0, Slot: 1}))
	f.Fuzz(fuzzFixed(DecodeHandle, func(h Handle) ([]byte, error) { return AppendHandle(nil, h), nil }))
}

func FuzzDecodeAcquireRequest(f *testing.F) {
	offer, _ := AppendOffer(nil, Offer{Backend: "ucx", Blob: []byte{1, 2}})
	for _, a := range []AcquireRequest{
		{Handle: Handle{Owner: 1, Slot: 2, Nonce: 3, Size: 4}},
		{Handle: Handle{Owner: 1, Slot: 2, Nonce: 3, Size: 4}, Offer: offer},
	} {
		b, _ := AppendAcquireRequest(nil, a)
		f.Add(b)
	}
	f.Fuzz(fuzzFixed(DecodeAcquireRequest, func(a AcquireRequest) ([]byte, error) { return AppendAcquireRequest(nil, a) }))
}

func FuzzDecodeAcquireResponse(f *testing.F) {
	for _, a := range []AcquireResponse{
		{Path: "chunked", Reason: "not_configured", Lease: 1, TTLMillis: 30000, Size: 10, ChunkSize: 1 << 20},
		{Path: "rdma", Reason: "ok", Lease: 2, TTLMillis: 1, Size: 1 << 30, ChunkSize: 1, Descriptor: []byte("desc")},
	} {
		b, _ := AppendAcquireResponse(nil, a)
		f.Add(b)
	}
	f.Fuzz(fuzzFixed(DecodeAcquireResponse, func(a AcquireResponse) ([]byte, error) { return AppendAcquireResponse(nil, a) }))
}

func FuzzDecodePullRequest(f *testing.F) {
	f.Add(AppendPullRequest(nil, PullRequest{Lease: 1, Offset: 1 << 20, Length: 1 << 20}))
	f.Fuzz(fuzzFixed(DecodePullRequest, func(p PullRequest) ([]byte, error) { return AppendPullRequest(nil, p), nil }))
}

func FuzzDecodeLeaseRequest(f *testing.F) {
	f.Add(AppendLeaseRequest(nil, LeaseRequest{Lease: 42}))
	f.Fuzz(fuzzFixed(DecodeLeaseRequest, func(l LeaseRequest) ([]byte, error) { return AppendLeaseRequest(nil, l), nil }))
}

func FuzzDecodeDrainNotice(f *testing.F) {
	f.Add(AppendDrainNotice(nil, DrainNotice{Incarnation: 0x0123456789abcdef}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(fuzzFixed(DecodeDrainNotice, func(n DrainNotice) ([]byte, error) { return AppendDrainNotice(nil, n), nil }))
}

func FuzzDecodeMetadata(f *testing.F) {
	b, _ := AppendMetadata(nil, Metadata{Size: 5, Refs: 2, Leases: 1, Staging: "not_pinned"})
	f.Add(b)
	f.Fuzz(fuzzFixed(DecodeMetadata, func(m Metadata) ([]byte, error) { return AppendMetadata(nil, m) }))
}

func FuzzDecodeOffer(f *testing.F) {
	b, _ := AppendOffer(nil, Offer{Backend: "ucx", Blob: []byte{9, 9}})
	f.Add(b)
	f.Add([]byte{0, 0, 0})
	f.Fuzz(fuzzFixed(DecodeOffer, func(o Offer) ([]byte, error) { return AppendOffer(nil, o) }))
}

func FuzzDecodeRDMADescriptor(f *testing.F) {
	b, _ := AppendRDMADescriptor(nil, RDMADescriptor{Key: bytes.Repeat([]byte{7}, 64)})
	f.Add(b)
	f.Add([]byte{RDMADescriptorVersion, 0, 0})
	f.Add([]byte{1, 0, 1, 9})
	for _, mt := range []uint8{RDMAMemoryHost, RDMAMemoryCUDA, 2, 0xff} {
		b, _ := AppendRDMADescriptor(nil, RDMADescriptor{Version: RDMADescriptorMemoryVersion, Memory: mt, Key: []byte{5, 6, 7}})
		f.Add(b)
		f.Add([]byte{RDMADescriptorMemoryVersion, mt, 0, 1, 9})
	}
	f.Add([]byte{RDMADescriptorMemoryVersion})
	f.Add([]byte{RDMADescriptorMemoryVersion, 1, 0})
	f.Fuzz(fuzzFixed(DecodeRDMADescriptor, func(d RDMADescriptor) ([]byte, error) { return AppendRDMADescriptor(nil, d) }))
}

func FuzzCheckRDMAOffer(f *testing.F) {
	f.Add(AppendRDMAOffer(nil))
	f.Add(AppendRDMAOfferVersion(nil, RDMALegacyOfferVersion))
	f.Add([]byte{1})
	f.Add([]byte{1, 1})
	f.Add([]byte{3, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := RDMAOfferVersionOf(b)
		checkErr(t, err)
		if err == nil && !bytes.Equal(b, AppendRDMAOfferVersion(nil, v)) {
			t.Fatalf("accepted offer %x", b)
		}
		if (CheckRDMAOffer(b) == nil) != (err == nil) {
			t.Fatalf("CheckRDMAOffer and RDMAOfferVersionOf disagree on %x", b)
		}
	})
}

func TestRDMADescriptorRefusesWhatItCannotAccountFor(t *testing.T) {
	good, err := AppendRDMADescriptor(nil, RDMADescriptor{Key: []byte{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{
		"empty":       nil,
		"version":     append([]byte{1}, good[1:]...),
		"trailing":    append(append([]byte(nil), good...), 0),
		"truncated":   good[:len(good)-1],
		"no key":      {RDMADescriptorVersion, 0, 0},
		"key too big": append([]byte{RDMADescriptorVersion, 0x10, 0x01}, make([]byte, MaxRDMAKeyLen+1)...),
	} {
		if _, err := DecodeRDMADescriptor(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, in := range map[string][]byte{
		"v3 no memory type":      {RDMADescriptorMemoryVersion},
		"v3 unknown memory type": {RDMADescriptorMemoryVersion, 2, 0, 1, 9},
		"v3 no key":              {RDMADescriptorMemoryVersion, 1, 0, 0},
	} {
		if _, err := DecodeRDMADescriptor(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := AppendRDMADescriptor(nil, RDMADescriptor{Memory: RDMAMemoryCUDA, Key: []byte{1}}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a version-2 descriptor named CUDA memory: %v", err)
	}
	if _, err := DecodeRDMADescriptor(append([]byte{9}, good[1:]...)); !errors.Is(err, ErrVersion) {
		t.Errorf("another version is not ErrVersion: %v", err)
	}
	for _, key := range [][]byte{nil, make([]byte, MaxRDMAKeyLen+1)} {
		if _, err := AppendRDMADescriptor(nil, RDMADescriptor{Key: key}); !errors.Is(err, ErrMalformed) {
			t.Errorf("encoded a %d-byte key", len(key))
		}
	}
}

func FuzzDecodeUCXBlob(f *testing.F) {
	f.Add(AppendUCXBlob(nil, UCXBlob{RMA: true, MaxFrame: 1 << 20, Incarnation: 7, Worker: []byte("addr")}))
	f.Add(AppendUCXBlob(nil, UCXBlob{RMA: true, MaxFrame: 1 << 20, Incarnation: 7, Build: UCXBuild{Major: 1, Minor: 22, Guard: "velo-ucx-guard/2"}, Worker: []byte("addr")}))
	f.Add([]byte{1})
	f.Add([]byte{3, 1, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 1, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeUCXBlob(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		again := AppendUCXBlob(nil, p)
		again[1] = b[1] // flag bits other than RMA are ignored, not kept
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decoded to %+v, which encodes as %x", b, p, again)
		}
	})
}

func FuzzDecodeUCXHeader(f *testing.F) {
	f.Add(AppendUCXHeader(nil, UCXHeader{Incarnation: 1, Sender: 2, Kind: UCXData, Epoch: 3, Seq: 4}))
	f.Add(AppendUCXHeader(nil, UCXHeader{Incarnation: 1, Sender: 2, Kind: UCXFin, Flags: UCXFinAsk | UCXFinBye, Epoch: 3}))
	f.Add(make([]byte, UCXHeaderLen))
	sealed := AppendUCXHeader(nil, UCXHeader{Incarnation: 1, Sender: 2, Kind: UCXFin, Flags: UCXFinBye, Sealed: true, Epoch: 3, Seq: 4})
	f.Add(append(sealed, bytes.Repeat([]byte{0xee}, UCXSealLen)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeUCXHeader(b)
		checkErr(t, err)
		if err != nil {
			return
		}
		// The fixed part round-trips; the seal (not checked here) is all that follows it.
		want := UCXHeaderLen
		if h.Sealed {
			want = UCXSealedHeaderLen
		}
		if len(b) != want || !bytes.Equal(AppendUCXHeader(nil, h), b[:UCXHeaderLen]) {
			t.Fatalf("round trip of %+v: %x vs %x", h, AppendUCXHeader(nil, h), b)
		}
	})
}

func FuzzDecodeUCXHelloBody(f *testing.F) {
	blob := AppendUCXBlob(nil, UCXBlob{MaxFrame: 1024, Incarnation: 3, Worker: []byte{9}})
	f.Add(AppendUCXHelloBody(nil, 5, blob))
	f.Add(InsertUCXHelloProof(AppendUCXHelloBody(nil, 5, blob), make([]byte, UCXHelloProofLen)))
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		prev, p, err := DecodeUCXHelloBody(b)
		checkErr(t, err)
		if err == nil && !bytes.Equal(AppendUCXHelloBody(nil, prev, b[4:]), b) {
			t.Fatalf("%x decoded to %d, %+v", b, prev, p)
		}
		body, proof, err := SplitUCXHelloProof(b)
		checkErr(t, err)
		if err == nil && !bytes.Equal(InsertUCXHelloProof(body, proof), b) {
			t.Fatalf("proof split of %x does not put back together", b)
		}
	})
}

// The memory-type descriptor and the offers of two releases: an owner answers each offer with
// the descriptor version the consumer reads, and a consumer of this build reads both.
func TestRDMADescriptorVersionsAcrossReleases(t *testing.T) {
	for _, c := range []struct {
		offer, desc uint8
	}{{RDMALegacyOfferVersion, RDMADescriptorVersion}, {RDMAOfferVersion, RDMADescriptorMemoryVersion}} {
		v, err := RDMAOfferVersionOf(AppendRDMAOfferVersion(nil, c.offer))
		if err != nil || v != c.offer {
			t.Fatalf("offer %d: %d, %v", c.offer, v, err)
		}
		if got := DescriptorVersionFor(v); got != c.desc {
			t.Fatalf("offer %d answered with descriptor %d, want %d", c.offer, got, c.desc)
		}
		b, err := AppendRDMADescriptor(nil, RDMADescriptor{Version: c.desc, Key: []byte{1, 2}})
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != c.desc {
			t.Fatalf("descriptor version byte %d, want %d", b[0], c.desc)
		}
		d, err := DecodeRDMADescriptor(b)
		if err != nil || d.Memory != RDMAMemoryHost || !bytes.Equal(d.Key, []byte{1, 2}) {
			t.Fatalf("decoded %+v, %v", d, err)
		}
	}
	// What a release before memory types encoded decodes to host memory.
	d, err := DecodeRDMADescriptor([]byte{2, 0, 1, 7})
	if err != nil || d.Memory != RDMAMemoryHost || d.Version != RDMADescriptorVersion {
		t.Fatalf("a version-2 descriptor decoded to %+v, %v", d, err)
	}
	b, err := AppendRDMADescriptor(nil, RDMADescriptor{Version: RDMADescriptorMemoryVersion, Memory: RDMAMemoryCUDA, Key: []byte{7}})
	if err != nil || !bytes.Equal(b, []byte{3, 1, 0, 1, 7}) {
		t.Fatalf("a CUDA descriptor encoded to %x, %v", b, err)
	}
}

package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodersNameTheProblem(t *testing.T) {
	addr, _ := EncodeTCPAddr("127.0.0.1:80")
	hello := mustHello(t, Hello{Version: HelloVersion, ID: 1, Incarnation: 1, Addr: addr})
	cases := []struct {
		name    string
		err     error
		version bool
		want    string
	}{
		{"truncated hello", func() error { _, err := DecodeHello(hello[:len(hello)-1]); return err }(), false, "needs"},
		{"http probe", func() error { _, err := DecodeHello([]byte("GET / HTTP/1.1\r\n\r\n")); return err }(), false, "not a velo TCP transport"},
		{"old hello", func() error {
			b := append([]byte(nil), hello...)
			b[4] = 0
			_, err := DecodeHello(b)
			return err
		}(), true, "speaks 2 to 3"},
		{"future hello", func() error {
			b := append([]byte(nil), hello...)
			b[4] = HelloVersion + 1
			_, err := DecodeHello(b)
			return err
		}(), true, "share a wire version"},
		{"zero id hello", func() error { _, err := DecodeHello(mustHello(t, Hello{Version: HelloVersion})); return err }(), false, "reserved"},
		{"trailing", func() error { _, err := DecodeHandle(append(AppendHandle(nil, Handle{Owner: 1}), 0)); return err }(), false, "trailing"},
		{"bad port", func() error { _, err := EncodeTCPAddr("host:0"); return err }(), false, "port"},
		{"one-way with id", func() error {
			b, _ := AppendCallHeader(nil, Header{Kind: KindOneWay, ID: 3}, "x")
			_, err := DecodeMessage(b)
			return err
		}(), false, "request id"},
		{"unknown kind", func() error { _, err := DecodeHeader([]byte{1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}); return err }(), false, "unknown kind"},
		{"future frame", func() error { _, err := DecodeHeader([]byte{2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); return err }(), true, "version 2"},
		{"huge length", func() error {
			b, _ := AppendOffer(nil, Offer{Backend: "ucx"})
			b[len(b)-1] = 0xff // blob length far beyond the input
			_, err := DecodeOffer(b)
			return err
		}(), false, "needs"},
		{"duplicate transport", func() error {
			b, _ := AppendPeerInfo(nil, PeerInfo{ID: 1, Addrs: []PeerAddr{{"tcp", nil}, {"tcp", nil}}})
			_, err := DecodePeerInfo(b)
			return err
		}(), false, "twice"},
		{"lease zero", func() error {
			b, _ := AppendAcquireResponse(nil, AcquireResponse{Path: "chunked", ChunkSize: 1})
			_, err := DecodeAcquireResponse(b)
			return err
		}(), false, "without a lease"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !errors.Is(c.err, ErrMalformed) {
				t.Fatalf("want ErrMalformed, got %v", c.err)
			}
			if c.version != errors.Is(c.err, ErrVersion) {
				t.Fatalf("ErrVersion match = %v, want %v: %v", !c.version, c.version, c.err)
			}
			if !strings.Contains(c.err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", c.err, c.want)
			}
		})
	}
}

func TestErrorBodyCutsLongText(t *testing.T) {
	b := AppendErrorBody(nil, ErrorBody{Code: CodeHandlerError, Text: strings.Repeat("x", 10*MaxErrorText)})
	e, err := DecodeErrorBody(b)
	if err != nil || len(e.Text) != MaxErrorText {
		t.Fatalf("got %d bytes of text, %v", len(e.Text), err)
	}
}

func TestResponseHeaderIsFixedSize(t *testing.T) {
	// transport.Claimer relies on a response's payload starting right after HeaderLen bytes.
	b := AppendHeader(nil, Header{Kind: KindResponse, ID: 1})
	if len(b) != HeaderLen {
		t.Fatalf("header is %d bytes, HeaderLen says %d", len(b), HeaderLen)
	}
}

// TestHelloOfTheOldestVersionDecodes: a version-2 hello (an instance of the previous release) is
// read as it is, so the transport can speak version 2 with it.
func TestHelloOfTheOldestVersionDecodes(t *testing.T) {
	b := mustHello(t, Hello{Version: HelloVersionMin, ID: 5, Incarnation: 6, MaxFrame: 1 << 20})
	h, err := DecodeHello(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != HelloVersionMin || h.ID != 5 {
		t.Fatalf("decoded %+v", h)
	}
}

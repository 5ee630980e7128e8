package main

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// packet4 is an IPv4 TCP packet from port src carrying payload.
func packet4(src uint16, payload []byte) []byte {
	ip := make([]byte, 20)
	ip[0] = 0x45
	ip[9] = 6
	binary.BigEndian.PutUint16(ip[2:], uint16(20+20+len(payload)))
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp, src)
	tcp[12] = 5 << 4
	return append(append(ip, tcp...), payload...)
}

func newTestObserver(inc, sender uint64) *observer {
	needle := binary.BigEndian.AppendUint64(nil, inc)
	return &observer{needle: binary.BigEndian.AppendUint64(needle, sender), marker: []byte("c0ffee"),
		epochs: map[uint16]map[uint32]*epochSeen{}}
}

// TestObserverReadsFrameHeaders: frame headers of the watched peer are found anywhere in a TCP
// payload, sealed or not, several per packet; the same 16 bytes followed by something that is not
// a header are not taken for one; the marker is counted once per packet that carries it.
func TestObserverReadsFrameHeaders(t *testing.T) {
	o := newTestObserver(7, 9)
	var p []byte
	p = append(p, []byte("ucx framing before the header")...)
	p = append(p, frameHeader(7, 9, kindData, 0, 2, 41, nil)...)
	p = append(p, []byte("a message, then another frame, sealed")...)
	p = append(p, frameHeader(7, 9, kindData, 0, 2, 42, make([]byte, sealLen))...)
	p = append(p, frameHeader(7, 9, kindHello, 0, 3, 0, nil)...)
	notHeader := append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 7), 9), 0xff, 0xff, 0xff, 0xff)
	p = append(p, append(notHeader, make([]byte, 16)...)...)
	p = append(p, []byte("...c0ffee...")...)

	payload, src := tcpPayload(packet4(4242, p))
	require.Equal(t, uint16(4242), src)
	o.look(payload, src)
	require.Equal(t, 1, o.leaks)
	require.Equal(t, uint64(42), o.epochs[4242][2].MaxSeq)
	require.Equal(t, 2, o.epochs[4242][2].Frames)
	require.True(t, o.epochs[4242][3].Hello)
	require.Len(t, o.epochs[4242], 2, "the bytes that are not a header were taken for one")
}

// FuzzObserver: whatever arrives on the wire, the observer neither panics nor reads past a packet.
func FuzzObserver(f *testing.F) {
	f.Add(packet4(1, frameHeader(7, 9, kindFin, finBye, 1, 3, nil)))
	f.Add([]byte{0x60, 0, 0, 0, 0, 8, 6, 64})
	f.Add([]byte{0x45, 0, 0, 10, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o := newTestObserver(7, 9)
		if p, src := tcpPayload(b); p != nil {
			o.look(p, src)
		}
		o.look(b, 0)
	})
}

// TestProcAddr decodes /proc/net/tcp's addresses, IPv4 and IPv6.
func TestProcAddr(t *testing.T) {
	ip, port, err := procAddr("0100007F:1F90")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", ip.String())
	require.Equal(t, 8080, port)
	ip, port, err = procAddr("00000000000000000000000001000000:0016")
	require.NoError(t, err)
	require.Equal(t, "::1", ip.String())
	require.Equal(t, 22, port)
	for _, bad := range []string{"", "0100007F", "zz:1", "0100:1", "0100007F:zzzzz"} {
		_, _, err := procAddr(bad)
		require.Error(t, err, bad)
	}
}

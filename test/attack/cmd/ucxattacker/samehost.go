package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The same-host socket's handshake and read frames, written out by hand as an attacker would
// (the layout of velo's shm package): a handshake frame is a 2-byte big-endian length and a
// body; the owner greets first (magic, instance ID, incarnation, a nonce, its host identity), the
// consumer says hello (magic, its ID and incarnation, the owner's, both nonces, a proof), and the
// owner answers (magic, a code: 0 accepted, with the ring's descriptor). Read frames are 64 bytes.
var (
	shmGreet  = []byte("VSHO")
	shmHello  = []byte("VSHC")
	shmAccept = []byte("VSHA")
	shmKey    = []byte{'V', 'S', 'H', 1}
)

// shmRaw connects to a victim's same-host socket (Socket) and tries to read through it without
// the cluster secret: it takes the greeting, says hello in the name of the peer Sender/Inc with a
// proof of random bytes, and then, whatever the answer, sends read frames for the keys of Reads
// (slot, token, base and length, guessed or taken from elsewhere). It answers how far it got:
// whether it connected, was greeted, the answer's code, how many descriptors (rings) came with
// any frame, and how many bytes came after the answer, and whether Marker was among them.
func (a *attacker) shmRaw(c cmd, timeout time.Duration) (map[string]any, error) {
	if c.Socket == "" {
		return nil, errors.New("shm_raw: want the victim's socket path")
	}
	sender, err1 := strconv.ParseUint(c.Sender, 16, 64)
	inc, err2 := strconv.ParseUint(c.Inc, 16, 64)
	marker, err3 := hex.DecodeString(c.Marker)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("shm_raw: sender, inc, marker: %w", err)
	}
	out := map[string]any{"connected": false, "greeted": false, "answer_code": -1, "rings": 0, "bytes_after": 0, "marker_seen": false}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: c.Socket, Net: "unix"})
	if err != nil {
		out["err"] = err.Error()
		return out, nil
	}
	defer conn.Close()
	out["connected"] = true
	conn.SetDeadline(time.Now().Add(timeout))
	rings := 0
	g, fds, err := shmReadFrame(conn)
	rings += fds
	if err != nil {
		out["err"], out["rings"] = "reading the greeting: "+err.Error(), rings
		return out, nil
	}
	if len(g) < 38 || !bytes.Equal(g[:4], shmGreet) {
		out["err"], out["rings"] = fmt.Sprintf("no greeting: %x", g), rings
		if len(g) == 5 && bytes.Equal(g[:4], shmAccept) {
			out["answer_code"] = int(g[4])
		}
		return out, nil
	}
	out["greeted"] = true
	h := append([]byte{}, shmHello...)
	h = binary.LittleEndian.AppendUint64(h, sender)
	h = binary.LittleEndian.AppendUint64(h, inc)
	h = append(h, g[4:20]...)  // the owner's ID and incarnation
	h = append(h, g[20:36]...) // its nonce
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	h = append(h, nonce...)
	proof := make([]byte, 32)
	_, _ = rand.Read(proof)
	h = binary.LittleEndian.AppendUint16(h, uint16(len(proof)))
	h = append(h, proof...)
	if err := shmWriteFrame(conn, h); err != nil {
		out["err"] = "writing the hello: " + err.Error()
		return out, nil
	}
	ans, fds, err := shmReadFrame(conn)
	rings += fds
	if err == nil && len(ans) >= 5 && bytes.Equal(ans[:4], shmAccept) {
		out["answer_code"] = int(ans[4])
	} else if err != nil {
		out["err"] = "reading the answer: " + err.Error()
	}
	// The reads, sent whatever the answer was.
	var reads []byte
	for i, r := range c.Reads {
		f := make([]byte, 64)
		f[0] = 'R'
		if i == len(c.Reads)-1 {
			f[2] = 1 // the batch's last
		}
		copy(f[4:], shmKey)
		binary.LittleEndian.PutUint32(f[8:], r.Slot)
		binary.LittleEndian.PutUint64(f[12:], r.Token)
		binary.LittleEndian.PutUint64(f[20:], r.Addr)
		binary.LittleEndian.PutUint64(f[28:], r.Len)
		binary.LittleEndian.PutUint64(f[36:], 0)
		binary.LittleEndian.PutUint64(f[44:], r.Len)
		binary.LittleEndian.PutUint32(f[52:], uint32(i+1))
		reads = append(reads, f...)
	}
	if _, err := conn.Write(reads); err != nil {
		out["write_err"] = err.Error()
	}
	// Everything the owner sends after its answer, until it hangs up or a second passes.
	conn.SetDeadline(time.Now().Add(time.Second))
	var after []byte
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*16))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		// A failed read (a reset, not only EOF) reports n and oobn as -1.
		if n > 0 {
			after = append(after, buf[:n]...)
		}
		if oobn > 0 {
			rings += closeRights(oob[:oobn])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				out["closed"] = true
			}
			break
		}
	}
	out["rings"], out["bytes_after"] = rings, len(after)
	out["marker_seen"] = len(marker) > 0 && bytes.Contains(after, []byte(hex.EncodeToString(marker)))
	if len(after) > 0 {
		out["after"] = hex.EncodeToString(after[:min(len(after), 64)])
	}
	return out, nil
}

// shmWriteFrame writes one handshake frame.
func shmWriteFrame(c *net.UnixConn, body []byte) error {
	_, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(body))), body...))
	return err
}

// shmReadFrame reads one handshake frame and counts (and closes) the descriptors that came with it.
func shmReadFrame(c *net.UnixConn) ([]byte, int, error) {
	hdr := make([]byte, 2)
	oob := make([]byte, unix.CmsgSpace(4*16))
	n, oobn, _, _, err := c.ReadMsgUnix(hdr, oob)
	if err != nil { // n and oobn are -1 then
		return nil, 0, err
	}
	fds := closeRights(oob[:oobn])
	if n < 2 {
		if _, err := io.ReadFull(c, hdr[n:]); err != nil {
			return nil, fds, err
		}
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr))
	_, err = io.ReadFull(c, body)
	return body, fds, err
}

// closeRights closes every descriptor passed in the control message oob and counts them.
func closeRights(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
			n++
		}
	}
	return n
}

// Command ucxattacker is the attacker of the attacker suite (package attack): a process with no
// cluster secret and no velo instance. It learns what a process on the fabric can learn (the
// victim's published UCX address, the frames an authenticated peer sends, the victim's
// listening sockets) and then tries, at the lowest layer it can reach, to read, write and
// deliver what it has no right to:
//
//   - through the ucx binding's low layer (a UCP context, worker and endpoint of its own to the
//     victim's worker): GET, PUT and atomics at any address, with a key packed from its own
//     memory or any key bytes it was given; velo's guarded GET request, single and vectored,
//     and its guarded PUT request (guardput.go), written by hand; velo's UCX transport frames,
//     written by hand, in another peer's name;
//   - through a plain TCP socket to the victim's UCX tcp listening port, speaking UCX's tcp
//     transport wire protocol itself (rawtcp.go): the tcp transport's PUT request and ucp's
//     software RMA messages with raw addresses and guessed or forged endpoint ids; a flood of
//     plain connections to that port (flood.go); connection requests planted there in another
//     peer's name (plant.go);
//   - through the victim's same-host socket (samehost.go), where its same-host path is on: the
//     handshake in another peer's name without the secret's proof, then read frames anyway;
//   - with a packet socket on the loopback interface (observe.go): the velo frames an
//     authenticated peer sends (its epochs and sequence numbers), and whether any secret
//     byte of the victim ever crosses the wire.
//
// It reads one JSON command a line on standard input and answers each with one JSON line; see
// the cmd type for the fields and main's switch for the operations. Nothing here uses velo's
// client code: every layout the attacker writes is written out by hand (layouts.go), as an
// attacker would.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// cmd is one command. Op selects the operation; the other fields are its arguments (unused
// ones are zero).
type cmd struct {
	Op string `json:"op"`

	// The victim and the peer impersonated.
	Blob   string `json:"blob,omitempty"`   // the victim's published UCX address blob (hex)
	Pid    int    `json:"pid,omitempty"`    // the victim's process (raw TCP: its listening sockets)
	Skip   []int  `json:"skip,omitempty"`   // listening ports that are not UCX's (the control plane)
	Sender string `json:"sender,omitempty"` // the impersonated peer's instance ID (hex)
	Inc    string `json:"inc,omitempty"`    // its incarnation (hex)
	Pids   []int  `json:"pids,omitempty"`   // the processes whose traffic the observer watches
	Marker string `json:"marker,omitempty"` // secret bytes to watch for on the wire (hex)

	// Memory operations.
	Addr    uint64   `json:"addr,omitempty"`
	Len     uint64   `json:"len,omitempty"`
	Key     string   `json:"key,omitempty"`     // "own", or a UCX packed key (hex)
	Data    string   `json:"data,omitempty"`    // bytes to write (hex)
	Atomics []string `json:"atomics,omitempty"` // add, swap, cswap, and, or, xor: posted together
	Value   uint64   `json:"value,omitempty"`

	// Guarded GET requests, and the one write of a guarded PUT (with Data, sent by rendezvous
	// with Rndv).
	Reads []guardRead `json:"reads,omitempty"`
	Rndv  bool        `json:"rndv,omitempty"`

	// Forged frames.
	Frames []forgedFrame `json:"frames,omitempty"`

	// Raw TCP.
	EPIDs   []uint64 `json:"ep_ids,omitempty"`
	UCP     string   `json:"ucp,omitempty"`     // put, get or atomic
	Version string   `json:"version,omitempty"` // the victim's UCX release
	Count   int      `json:"count,omitempty"`   // flood: connections to open; plant: sequence numbers
	Claims  []string `json:"claims,omitempty"`  // plant: the impersonated peer's UCX addresses (ip:port)
	From    string   `json:"from,omitempty"`    // flood: the local (loopback) address to connect from
	AMID    int      `json:"am_id,omitempty"`   // raw_am: the UCT active-message id to send

	// The same-host socket.
	Socket string `json:"socket,omitempty"` // the victim's same-host socket path

	Timeout string `json:"timeout,omitempty"`
}

type guardRead struct {
	Slot  uint32 `json:"slot"`
	Token uint64 `json:"token"`
	Addr  uint64 `json:"addr"`
	Len   uint64 `json:"len"`
}

type forgedFrame struct {
	Kind    string `json:"kind"` // data, fin, hello
	Epoch   uint32 `json:"epoch"`
	Seq     uint64 `json:"seq"`
	Flags   uint8  `json:"flags,omitempty"`
	Sealed  bool   `json:"sealed,omitempty"`  // a sealed header with a seal of random bytes
	Payload string `json:"payload,omitempty"` // a data frame's runtime message text
}

func main() {
	// The UCX context and worker belong to one OS thread: this one.
	runtime.LockOSThread()
	out := json.NewEncoder(os.Stdout)
	a := &attacker{}
	defer a.close()
	reply := func(m map[string]any) {
		if err := out.Encode(m); err != nil {
			os.Exit(3)
		}
	}
	reply(map[string]any{"ready": true})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		var c cmd
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			reply(map[string]any{"error": fmt.Sprintf("command %q: %v", line, err)})
			continue
		}
		timeout := 10 * time.Second
		if c.Timeout != "" {
			if d, err := time.ParseDuration(c.Timeout); err == nil {
				timeout = d
			}
		}
		var m map[string]any
		var err error
		switch c.Op {
		case "connect":
			m, err = a.connect(c)
		case "get":
			m, err = a.get(c, timeout)
		case "put":
			m, err = a.put(c, timeout)
		case "atomic":
			m, err = a.atomic(c, timeout)
		case "guarded_get":
			m, err = a.guardedGet(c, false, timeout)
		case "guarded_getv":
			m, err = a.guardedGet(c, true, timeout)
		case "guarded_put":
			m, err = a.guardedPut(c, false, timeout)
		case "guarded_putv":
			m, err = a.guardedPut(c, true, timeout)
		case "forge":
			m, err = a.forge(c, timeout)
		case "observe_start":
			m, err = a.observeStart(c)
		case "watch":
			m, err = a.watch(c)
		case "observed":
			m, err = a.observed(c)
		case "raw_ports":
			m, err = rawPorts(c)
		case "raw_tcp_put":
			m, err = a.rawTCPPut(c, timeout)
		case "raw_ucp":
			m, err = a.rawUCP(c, timeout)
		case "raw_am":
			m, err = a.rawAM(c, timeout)
		case "flood":
			m, err = a.flood(c)
		case "flood_release":
			m = a.floodRelease()
		case "accept_probe":
			m, err = acceptProbe(c, timeout)
		case "plant":
			m, err = a.plant(c)
		case "plant_status":
			m = a.plantStatus()
		case "plant_release":
			m = a.plantRelease()
		case "shm_raw":
			m, err = a.shmRaw(c, timeout)
		case "quit":
			reply(map[string]any{"ok": true})
			return
		default:
			err = fmt.Errorf("unknown op %q", c.Op)
		}
		if err != nil {
			reply(map[string]any{"error": err.Error()})
			continue
		}
		if m == nil {
			m = map[string]any{}
		}
		reply(m)
	}
}

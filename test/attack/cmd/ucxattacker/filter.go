package main

import (
	"golang.org/x/sys/unix"
)

// portFilter is a classic BPF program for the observer's packet socket (a cooked socket: each
// packet starts at its IP header). It keeps IPv4 and IPv6 TCP packets whose source or
// destination port is one of ports and drops the rest in the kernel, so that a busy loopback
// (other suites moving gigabytes) neither costs this process a copy of every packet nor fills
// its receive buffer until the kernel drops the packets that matter. Every UCX tcp connection
// among the watched processes has one end on a listening port of one of them, so their
// listening ports are the whole set. No ports: every packet.
func portFilter(ports []uint16) []unix.SockFilter {
	if len(ports) == 0 {
		return []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 1 << 18}}
	}
	var a bpfAsm
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_ABS, 0) // the version nibble
	a.op(unix.BPF_ALU|unix.BPF_RSH|unix.BPF_K, 4)
	a.jeq(4, "v4", "")
	a.jeq(6, "v6", "drop")

	a.label("v4")
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_ABS, 9) // protocol
	a.jeq(unix.IPPROTO_TCP, "", "drop")
	a.op(unix.BPF_LDX|unix.BPF_B|unix.BPF_MSH, 0) // X = the IPv4 header's length
	for _, off := range []uint32{0, 2} {          // source port, destination port
		a.op(unix.BPF_LD|unix.BPF_H|unix.BPF_IND, off)
		for _, p := range ports {
			a.jeq(uint32(p), "accept", "")
		}
	}
	a.jump("drop")

	a.label("v6")
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_ABS, 6) // next header (extension headers are not followed)
	a.jeq(unix.IPPROTO_TCP, "", "drop")
	for _, off := range []uint32{40, 42} {
		a.op(unix.BPF_LD|unix.BPF_H|unix.BPF_ABS, off)
		for _, p := range ports {
			a.jeq(uint32(p), "accept", "")
		}
	}
	a.jump("drop")

	a.label("accept")
	a.op(unix.BPF_RET|unix.BPF_K, 1<<18)
	a.label("drop")
	a.op(unix.BPF_RET|unix.BPF_K, 0)
	return a.assemble()
}

// bpfAsm assembles a program whose jumps name labels ("" is the next instruction).
type bpfAsm struct {
	prog   []unix.SockFilter
	jumps  map[int][3]string // instruction → jt, jf, ja labels
	labels map[string]int
}

func (a *bpfAsm) op(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *bpfAsm) jeq(k uint32, jt, jf string) {
	a.mark(jt, jf, "")
	a.op(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, k)
}

func (a *bpfAsm) jump(to string) {
	a.mark("", "", to)
	a.op(unix.BPF_JMP|unix.BPF_JA, 0)
}

func (a *bpfAsm) mark(jt, jf, ja string) {
	if a.jumps == nil {
		a.jumps = map[int][3]string{}
	}
	a.jumps[len(a.prog)] = [3]string{jt, jf, ja}
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

// assemble resolves the labels. Conditional jumps reach at most 255 instructions ahead: the
// callers' port lists are a handful.
func (a *bpfAsm) assemble() []unix.SockFilter {
	rel := func(i int, l string) int {
		if l == "" {
			return 0
		}
		return a.labels[l] - i - 1
	}
	for i, j := range a.jumps {
		a.prog[i].Jt, a.prog[i].Jf = uint8(rel(i, j[0])), uint8(rel(i, j[1]))
		if j[2] != "" {
			a.prog[i].K = uint32(rel(i, j[2]))
		}
	}
	return a.prog
}

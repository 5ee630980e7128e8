package multirail

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/gobuild"
	"github.com/velo-go/velo/test/internal/linecmd/driver"
)

// The hosts of the suite: two network namespaces joined by n veth pairs, one per rail, each on a
// subnet of its own (10.77.<rail>.0/24) and shaped on the owner's side, where the bytes of a GET
// leave, with a token bucket; plus one unshaped pair for velo's TCP control plane
// (10.77.100.0/24). The addresses live inside the namespaces only, so they cannot clash with
// anything outside.

const ctlSubnet = 100

// host is one namespace: its name, its rails' interfaces and addresses.
type host struct {
	ns   string
	devs []string
	ips  []string
	ctl  string // the control-plane address
}

var seq atomic.Uint32

// requireRoot skips the test, saying why, where namespaces or tc cannot be used.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("rails: needs root to create network namespaces and shape links; run the suite as root (make test-rails)")
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("rails: the %s command (Debian package iproute2) is not installed; run make deps", c)
		}
	}
}

// newHosts makes the owner's and the consumer's namespaces with rails shaped to rates (one entry
// per rail, tc's notation: "200mbit"), and removes them when the test ends.
func newHosts(t *testing.T, rates ...string) (owner, consumer host) {
	t.Helper()
	requireRoot(t)
	id := fmt.Sprintf("%d-%d", os.Getpid()%100000, seq.Add(1))
	owner, consumer = host{ns: "velo-rlo" + id}, host{ns: "velo-rlc" + id}
	cleanup := func() {
		_ = ipRun("netns", "del", owner.ns)
		_ = ipRun("netns", "del", consumer.ns)
	}
	t.Cleanup(cleanup)
	steps := [][]string{
		{"ip", "netns", "add", owner.ns},
		{"ip", "netns", "add", consumer.ns},
		{"ip", "-n", owner.ns, "link", "set", "lo", "up"},
		{"ip", "-n", consumer.ns, "link", "set", "lo", "up"},
	}
	link := func(od, cd string, subnet int) {
		oip, cip := fmt.Sprintf("10.77.%d.1", subnet), fmt.Sprintf("10.77.%d.2", subnet)
		steps = append(steps,
			[]string{"ip", "-n", owner.ns, "link", "add", od, "type", "veth", "peer", "name", cd, "netns", consumer.ns},
			[]string{"ip", "-n", owner.ns, "addr", "add", oip + "/24", "dev", od},
			[]string{"ip", "-n", consumer.ns, "addr", "add", cip + "/24", "dev", cd},
			[]string{"ip", "-n", owner.ns, "link", "set", od, "up"},
			[]string{"ip", "-n", consumer.ns, "link", "set", cd, "up"},
		)
		if subnet == ctlSubnet {
			owner.ctl, consumer.ctl = oip, cip
			return
		}
		owner.devs, owner.ips = append(owner.devs, od), append(owner.ips, oip)
		consumer.devs, consumer.ips = append(consumer.devs, cd), append(consumer.ips, cip)
	}
	link("ctlo", "ctlc", ctlSubnet)
	for i, rate := range rates {
		od := fmt.Sprintf("ro%d", i)
		link(od, fmt.Sprintf("rc%d", i), i)
		steps = append(steps, append([]string{"tc", "-n", owner.ns, "qdisc", "add", "dev", od, "root"}, tbf(rate)...))
	}
	for _, s := range steps {
		out, err := exec.Command(s[0], s[1:]...).CombinedOutput()
		if err != nil && strings.Contains(string(out), "Operation not permitted") {
			t.Skipf("rails: this machine does not allow network namespaces: %s: %s", strings.Join(s, " "), out)
		}
		require.NoError(t, err, "%s: %s", strings.Join(s, " "), out)
	}
	// A veth reads up only once both ends are: wait, so that the rail choice finds them up.
	waitUp(t, owner, owner.devs...)
	waitUp(t, consumer, consumer.devs...)
	return owner, consumer
}

// waitUp waits until every named interface of h reads up (operstate).
func waitUp(t *testing.T, h host, devs ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", h.ns, "-j", "link", "show").Output()
		require.NoError(t, err)
		var links []struct {
			Name  string `json:"ifname"`
			State string `json:"operstate"`
		}
		require.NoError(t, json.Unmarshal(out, &links))
		state := map[string]string{}
		for _, l := range links {
			state[l.Name] = l.State
		}
		var down []string
		for _, d := range devs {
			if state[d] != "UP" {
				down = append(down, d+" "+state[d])
			}
		}
		if len(down) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rails: interfaces of %s not up after 10 s: %v", h.ns, down)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tbf is the token bucket of a shaped rail: rate, a burst of 128 KiB (a few GSO packets) and a
// queue of at most 50 ms.
func tbf(rate string) []string {
	return []string{"tbf", "rate", rate, "burst", "128kb", "latency", "50ms"}
}

// setLink sets rail i of h up or down.
func setLink(t *testing.T, h host, i int, state string) {
	t.Helper()
	require.NoError(t, ipRun("-n", h.ns, "link", "set", h.devs[i], state))
}

func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// txBytes reads the kernel's transmit counters of h's rails (/sys/class/net/<dev>/statistics as
// ip -s reports them), by rail.
func txBytes(t *testing.T, h host) []uint64 {
	t.Helper()
	out, err := exec.Command("ip", "-n", h.ns, "-s", "-j", "link", "show").Output()
	require.NoError(t, err)
	var links []struct {
		Name  string `json:"ifname"`
		Stats struct {
			TX struct {
				Bytes uint64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	require.NoError(t, json.Unmarshal(out, &links))
	by := map[string]uint64{}
	for _, l := range links {
		by[l.Name] = l.Stats.TX.Bytes
	}
	got := make([]uint64, len(h.devs))
	for i, d := range h.devs {
		got[i] = by[d]
	}
	return got
}

// ------------------------------------------------------------------------------------ railnode

// railnode is cmd/railnode, built once per test binary (the go command takes the build tag of the
// static UCX from GOFLAGS, as make test-rails sets it).
var railnode = gobuild.New("github.com/velo-go/velo/test/multirail/cmd/railnode")

func TestMain(m *testing.M) {
	code := m.Run()
	railnode.Remove()
	ibcheck.Remove()
	os.Exit(code)
}

// node is one railnode process in a namespace (driver.Proc).
type node struct {
	*driver.Proc
	stderr *driver.Buffer
}

// startNode starts railnode in h's namespace over h's rails, with args, and waits until it is up.
func startNode(t *testing.T, name string, h host, args ...string) *node {
	t.Helper()
	return startNodeUnder(t, name, h, nil, args...)
}

// startNodeUnder is startNode with the command run under wrap (a command line that ends in the
// one it runs, such as ibcheck lanes' "--"), or directly when wrap is empty.
func startNodeUnder(t *testing.T, name string, h host, wrap []string, args ...string) *node {
	t.Helper()
	a := append([]string{"ip", "netns", "exec", h.ns, railnode.Path(t), "-devices", strings.Join(h.devs, ","), "-ctl", h.ctl + ":0"}, args...)
	a = append(append([]string(nil), wrap...), a...)
	cmd := exec.Command(a[0], a[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "UCX_NET_DEVICES=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	p := driver.StartT(t, name, cmd)
	return &node{Proc: p, stderr: p.Stderr}
}

// stop ends the node: its standard input closes, and it is killed if it has not exited 10 s
// later.
func (n *node) stop() { n.Close(10 * time.Second) }

// answer is railnode's answer to a command.
type answer struct {
	Error   string          `json:"error"`
	Peer    json.RawMessage `json:"peer"`
	Handle  string          `json:"handle"`
	SHA256  string          `json:"sha256"`
	SHA256s []string        `json:"sha256s"`
	Seconds float64         `json:"seconds"`
	Bytes   int             `json:"bytes"`
	Path    string          `json:"path"`
	Reason  string          `json:"reason"`
	Rails   []railStatus    `json:"rails"`
	Health  []string        `json:"health"`
}

type railStatus struct {
	Rail     int     `json:"rail"`
	Device   string  `json:"device"`
	Bytes    float64 `json:"bytes"`
	Reads    float64 `json:"reads"`
	Failures float64 `json:"failures"`
	Paused   bool    `json:"paused"`
}

// call sends the command cmd with its arguments, one line, and returns its answer (an error the
// command reports fails the test).
func (n *node) call(t *testing.T, cmd string, args ...string) answer {
	t.Helper()
	a, err := n.try(cmd, args...)
	require.NoError(t, err)
	return a
}

// try is call without the test: it returns the command's error.
func (n *node) try(cmd string, args ...string) (answer, error) {
	var a answer
	err := n.Decode(strings.Join(append([]string{cmd}, args...), " "), 2*time.Minute, &a)
	return a, err
}

// pair starts an owner and a consumer on the hosts and registers each with the other.
func pair(t *testing.T, owner, consumer host, args ...string) (o, c *node) {
	t.Helper()
	o = startNode(t, "owner", owner, args...)
	c = startNode(t, "consumer", consumer, args...)
	meet(t, o, c)
	return o, c
}

// meet registers each of o and c with the other.
func meet(t *testing.T, o, c *node) {
	t.Helper()
	op, cp := o.call(t, "info").Peer, c.call(t, "info").Peer
	c.call(t, "peer", string(op))
	o.call(t, "peer", string(cp))
}

// stage stages size bytes on the owner; it returns the handle and the SHA-256.
func stage(t *testing.T, o *node, size int, seed uint64) (handle, sha256 string) {
	t.Helper()
	a := o.call(t, "stage", strconv.Itoa(size), strconv.FormatUint(seed, 10))
	return a.Handle, a.SHA256
}

// getResult is the answer to a GET sent in the background, and its error.
type getResult struct {
	a   answer
	err error
}

// getLosingRail sends a GET of h to c in the background and sets rail 1 of oh down once the bytes
// the owner's rails sent since then satisfy past (checked every 10 ms, for up to within). It
// returns when the GET began, where its result will come, when the rail went down and what each
// rail had sent by then.
func getLosingRail(t *testing.T, c *node, oh host, h string, within time.Duration, past func(sent []float64) bool) (start time.Time, done <-chan getResult, downAt time.Time, atDown []float64) {
	t.Helper()
	before := txBytes(t, oh)
	res := make(chan getResult, 1)
	start = time.Now()
	go func() {
		a, err := c.try("get", h)
		res <- getResult{a, err}
	}()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if d := delta(before, txBytes(t, oh)); past(d) {
			setLink(t, oh, 1, "down")
			return start, res, time.Now(), d
		}
	}
	t.Fatalf("the GET's bytes did not reach the point at which rail 1 goes down within %v", within)
	return
}

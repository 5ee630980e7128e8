package multirail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/gobuild"
)

// The lane witness: the owner runs under `ibcheck lanes`, the operators' tool, which counts in the
// kernel (eBPF on the process's cgroup) the bytes of every socket the owner opens, by the socket's
// local address. Each rail of a host has an address of its own, so the report's bytes per local
// address are the bytes per rail, counted below velo and below UCX.

// ibcheck is the operators' tool, built once per test binary. It needs no cgo for lanes, so it is
// built without (quicker, and the same binary operators get from make ibcheck-static).
var ibcheck = gobuild.New("github.com/velo-go/velo/tools/ibcheck", "CGO_ENABLED=0")

// witness is one `ibcheck lanes` run around a node.
type witness struct {
	report string
	node   *node
}

// lanesReport is the part of ibcheck lanes' JSON report (schema ibcheck-lanes/v1) the suite reads.
type lanesReport struct {
	Schema    string `json:"schema"`
	Addresses []struct {
		Address  string `json:"address"`
		BytesOut uint64 `json:"bytes_out"`
		BytesIn  uint64 `json:"bytes_in"`
	} `json:"local_addresses"`
}

// pairWitnessed is pair with the owner under ibcheck lanes.
func pairWitnessed(t *testing.T, owner, consumer host, args ...string) (o, c *node, w *witness) {
	t.Helper()
	w = &witness{report: filepath.Join(t.TempDir(), "lanes.json")}
	o = startNodeUnder(t, "owner", owner, []string{ibcheck.Path(t), "lanes", "--json", "--report", w.report, "--"}, args...)
	c = startNode(t, "consumer", consumer, args...)
	meet(t, o, c)
	w.node = o
	return o, c, w
}

// errNoWitness: this machine cannot count lanes (ibcheck lanes said why); the caller logs it and
// goes on with the kernel's interface counters alone.
var errNoWitness = errors.New("ibcheck lanes cannot count here")

// sentBy stops the witnessed node and returns the bytes its sockets sent from each of addrs, as
// ibcheck lanes reported them once the node had exited.
func (w *witness) sentBy(t *testing.T, addrs []string) ([]uint64, error) {
	t.Helper()
	w.node.stop()
	b, err := os.ReadFile(w.report)
	if err != nil {
		if log := w.node.stderr.String(); strings.Contains(log, "not supported") {
			return nil, fmt.Errorf("%w: %s", errNoWitness, log)
		}
		require.NoError(t, err, "ibcheck lanes wrote no report; the owner's log:\n%s", w.node.stderr.String())
	}
	var rep lanesReport
	require.NoError(t, json.Unmarshal(b, &rep), "%s", b)
	require.Equal(t, "ibcheck-lanes/v1", rep.Schema)
	by := map[string]uint64{}
	for _, a := range rep.Addresses {
		by[a.Address] = a.BytesOut
	}
	out := make([]uint64, len(addrs))
	for i, a := range addrs {
		out[i] = by[a]
	}
	t.Logf("ibcheck lanes, the owner's bytes out by local address: %+v", rep.Addresses)
	return out, nil
}

// Package slowpath logs, once per peer and reason, that transfers with a peer take a slower path
// than the pair could use. A metric counts every such transfer; the log line is what makes an
// operator look at the metric, and one line per transfer would drown everything else.
package slowpath

import (
	"fmt"
	"log/slog"
	"sync"
)

// Log remembers which (peer, reason) pairs it reported. Its zero value is ready to use.
type Log struct {
	seen sync.Map // key -> struct{}
}

type key struct {
	peer   uint64
	reason string
}

// Once logs msg at Info with the peer, the reason and args the first time it sees this peer with
// this reason, and does nothing after that. It reports whether it logged.
func (l *Log) Once(log *slog.Logger, msg string, peer uint64, reason string, args ...any) bool {
	if log == nil {
		return false
	}
	k := key{peer, reason}
	if _, ok := l.seen.Load(k); ok {
		return false
	}
	if _, dup := l.seen.LoadOrStore(k, struct{}{}); dup {
		return false
	}
	log.Info(msg, append([]any{"peer", fmt.Sprintf("%016x", peer), "reason", reason}, args...)...)
	return true
}

// Forget lets the next slower transfer with peer be logged again (the peer went, or restarted).
func (l *Log) Forget(peer uint64) {
	l.seen.Range(func(k, _ any) bool {
		if k.(key).peer == peer {
			l.seen.Delete(k)
		}
		return true
	})
}

// Worth reports whether a chunked transfer for reason is slower than the pair could have had:
// every reason but those that say one side cannot or must not use RDMA at all (not configured,
// switched off, device memory the transport cannot read, a drain) or that already log each time.
func Worth(reason string) bool {
	switch reason {
	case "no_offer", "budget", "pool_exhausted", "not_pinned", "decode_error":
		return true
	}
	return false
}

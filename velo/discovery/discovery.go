// Package discovery holds the backends velo.WithDiscovery uses to find the members of a cluster:
// each instance publishes a Record under a cluster name and watches the others come, change and
// go. Filesystem is the embedded default (a directory every member can read and write, NFS
// included); the interface a backend implements is velo.Discovery.
package discovery

import (
	"errors"
	"time"
)

// Record is what one member publishes. The backend stores it as it is; velo puts its PeerInfo in
// Info.
type Record struct {
	// Name is the member's stable name in the cluster (a pod or host name, say): the same name
	// published again by a new instance is a restart of that member. Default: the instance ID.
	Name        string `json:"name"`
	ID          uint64 `json:"id,string"`
	Incarnation uint64 `json:"incarnation,string"`
	// Info is the member's PeerInfo as JSON.
	Info []byte `json:"info"`
	// Draining says the member is shutting down gracefully: do not send it new work.
	Draining bool `json:"draining"`
	// Started is when the instance started, by its own clock: members use it to measure how long
	// a newcomer took to be registered with them (a figure as good as the clocks agree).
	Started time.Time `json:"started,omitzero"`
}

// EventKind says what happened to a member.
type EventKind int

// Event kinds.
const (
	// Joined: a member appeared (every member already there is delivered as Joined first).
	Joined EventKind = iota + 1
	// Updated: a member published a change (it started draining, say).
	Updated
	// Restarted: a member's name was published by another instance (a new ID or incarnation):
	// the old instance is gone. Event.Previous is the record it replaced.
	Restarted
	// Left: a member withdrew, or its entry expired (no heartbeat within its TTL).
	Left
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Updated:
		return "updated"
	case Restarted:
		return "restarted"
	case Left:
		return "left"
	}
	return "unknown"
}

// Event is one change of the cluster's membership.
type Event struct {
	Kind     EventKind
	Record   Record
	Previous Record // the record a Restarted event replaced
	At       time.Time
}

// Compare says what a member's record seen now means against the one known before (had: there
// was one): Joined, Restarted (another instance under the name), Updated (a change of its
// drain flag or PeerInfo), or nothing. Every backend applies this one rule.
func Compare(known Record, had bool, now Record, at time.Time) (Event, bool) {
	switch {
	case !had:
		return Event{Kind: Joined, Record: now, At: at}, true
	case known.ID != now.ID || known.Incarnation != now.Incarnation:
		return Event{Kind: Restarted, Record: now, Previous: known, At: at}, true
	case known.Draining != now.Draining || string(known.Info) != string(now.Info):
		return Event{Kind: Updated, Record: now, At: at}, true
	}
	return Event{}, false
}

// Status is a backend's view of its own health, for velo's Health and metrics.
type Status struct {
	// Backend names it ("filesystem", "etcd").
	Backend string
	// Err is set while the backend cannot reach its store (etcd unreachable, the directory
	// unreadable); Since is when that began. The members known stay registered meanwhile.
	Err   error
	Since time.Time
	// PublishErrors and WatchErrors count failed publishes (heartbeats, lease renewals) and failed
	// reads of the membership since the backend was made.
	PublishErrors uint64
	WatchErrors   uint64
}

// ErrClosed: the backend was closed.
var ErrClosed = errors.New("discovery closed")

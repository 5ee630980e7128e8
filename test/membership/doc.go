// Package membership measures cluster membership as its users meet it: how long N member
// processes take until every one has seen every other up, through the filesystem backend and
// through a real etcd, and how many membership events one watcher takes per second. Run it with
// make bench-discovery; it prints figures, and etcd's as a ratio to the filesystem's measured in
// the same run.
package membership

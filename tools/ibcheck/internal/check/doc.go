// Package check holds ibcheck's checks: each step of the guide's "Prepare each node" and "Set the
// runtime environment", and each detectable row of its "Common failures", as a function that
// returns a Result — a verdict (Pass, Warn, Fail; Skip or NotCompiled where that is the truth),
// the probe's answer, the finding and the fix in words, and the facts behind them. Run runs them
// all in a fixed order (Checks lists them); Env computes the `ibcheck env` lines. Rendering (table,
// JSON) belongs to the command.
//
// # Why it is built this way
//
// Three-valued answers. Every probe it calls (packages verbs, mlx5dv, rdmacm, ucx) answers nil,
// an error wrapping verbs.ErrNotSupported, or any other error. A definite "no" is a finding about
// the node and may fail it; "could not tell" never fails a node, is a Warn, and its finding starts
// with "could not tell:", so an operator never confuses a broken probe with a broken node.
//
// One seam, System. What depends on the machine rather than on the sysfs tree and the
// environment — the memlock limit, the linked UCX's answers, a real registration, a DEVX context,
// the interface list — comes through System. Live wires the real thing; tests replace the parts
// whose answer would make golden files machine-specific or that need hardware, and the real parts
// are tested for real in this module and in theirs.
//
// The linked UCX is asked in child processes (see ProbeUCX): UCX reads UCX_* variables when a
// context is created and the environment wins, so only a child with a controlled environment can
// report the library's own defaults and try a GET under a chosen UCX_PROTO_ENABLE; and a UCX that
// aborts takes only the child with it.
//
// Velo's numbers are imported, not repeated: the arena size and registered-bytes budget that size
// the memlock need, the kill switch's variable and parser, and the UCX wire version come from the
// velo module (velo.go).
package check

// Package verbstest runs child processes the way an unprivileged RDMA user would run them:
// without CAP_IPC_LOCK (and without CAP_SYS_RESOURCE, so the child cannot lift its own hard
// limit) and under a chosen RLIMIT_MEMLOCK. Tests use it to meet the memlock failures of the
// guide for real — "ibv_reg_mr fails at 32 MiB with an 8 MiB limit" — on a machine where the test
// itself runs as root with every capability.
//
// # How
//
// Capabilities and limits must be changed in the child between fork and exec, which os/exec
// cannot do. So [Command] starts the current executable again with a marker argument; this
// package's init function recognises the marker before anything else runs, drops the capabilities
// from the bounding, inheritable, ambient, permitted and effective sets of the (locked) main
// thread, sets RLIMIT_MEMLOCK, and execs the real target. Dropping the capability from the
// bounding set matters: a root process regains every capability in its bounding set at execve.
// Any program that imports verbstest therefore carries the trampoline; it does nothing unless
// the marker is the first argument.
//
// [RunTest] builds on Command to re-run the calling test alone in such a child, which is the
// simplest way to check what a library does under a small limit:
//
//	func TestRegisterUnderLimit(t *testing.T) {
//		if verbstest.InChild() {
//			// runs in the constrained child: register, expect verbs.ErrMemlock ...
//			return
//		}
//		verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 8 << 20})
//	}
package verbstest

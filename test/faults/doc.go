// Package faults is the fault suite (make test-faults): real owner and consumer processes
// (cmd/faultnode) over the real UCX transport, stopped, resumed and killed at the worst moments,
// and after every case the same questions: is the owner alive, are its registered and pinned
// bytes back where they started, did every payload reported delivered have the right SHA-256,
// and did each process exit with the status it should.
//
// UCX_TLS=tcp is set in code unless the environment names transports, so the suite runs on
// InfiniBand unchanged when UCX_TLS and UCX_NET_DEVICES are set.
//
// # The same-host path on
//
// VELO_TEST_SAME_HOST=1 turns the same-host path (velo.WithSameHost) on in every faultnode that
// does not pin it (-same-host=false); the launcher hands the variable to each node, and a test
// reads the path its pairs take from okPath (shm/ok with the switch on, rdma/ok without), and pair
// waits until both sides' probes of each other's socket ended. make test-faults runs the suite
// with the switch off (=0); make test-faults-samehost runs these cases with it on, each now moving
// its bytes through shared memory: TestConsumerKilledMidGet (the owner's rings have 4 KiB
// buffers, ownerFlags, so the read is still under way when the consumer dies),
// TestTamperedHandles, TestBudgetSpent, TestOwnerRestartedOnTheSameAddress and
// TestMemlockWithoutIPCLock. The others stay out:
//
//   - the stalled-consumer cases (TestStalledConsumerResumed, TestStalledConsumerKilled,
//     TestStalledConsumerForceClosed, TestCloseUnderStalledConsumer): in fresh-clone runs on a
//     quiet machine their read through the lane was not always still under way when the
//     consumer was stopped (the owner had no lease registration to quarantine within 30 s), so
//     they run in test-faults only until their timing is made certain on this path (the
//     TestSameHost cases stop and kill consumers mid-read on the lane themselves);
//   - pinned off, each saying why: TestPeerBlobVersionSkew's skewed consumer (the case is UCX's
//     address version, which the same-host path does not need) and TestIdleReaperUnderBursts
//     (the gets must use UCX endpoints for the reaper to retire them); with the path on they
//     would only repeat test-faults;
//   - about UCX itself: TestMixedUCXBuilds (two UCX builds refusing each other, release_mismatch)
//     and TestSharedMemoryUCXLanesFallBackWithTheirReason (UCX's shared-memory lanes alone,
//     no_ucx_lane);
//   - messages only, no rendezvous: TestSendToAStoppedPeerEndsAtItsContext;
//   - membership and budgets: the filesystem, etcd and namespace cases and the sixteen members
//     within endpoint budgets test discovery and UCX's endpoints, and put a bridge into the
//     network namespace (which is why test-faults runs alone); their transfers assert rdma/ok;
//   - the TestSameHost cases and TestSharedMemoryUCXLanesWithTheSameHostPath turn the path on
//     themselves and run in test-faults; TestSoakShort, 30 s, runs there too.
package faults

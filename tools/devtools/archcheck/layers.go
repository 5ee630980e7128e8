package main

// The layers of the repository: the one table the import check enforces and docs/architecture.md
// prints (between its layers markers, written by archcheck -write-doc). A package sits in one row;
// a package may import the packages of lower layers only (any standard-library or third-party
// package is free), so two packages of one layer never import each other. Each library package
// sits on its floor: one layer above the highest it imports, so the numbers say how far a change
// reaches. Test kits and programs sit above the library, so that no library package imports them.
// A new package gets a row here before the check passes, and the check says which layer it
// measures for it.
var velo = Table{
	Module: "github.com/velo-go/velo",
	Rows: []Row{
		{8, Program, "programs and tests", []string{"test/...", "tools/ibcheck/internal/check", "velo/examples/internal/twoproc"},
			"what the cross-module tests, ibcheck and the examples share; nothing imports them"},
		{7, Kit, "test kits", []string{"test/internal/gobuild", "test/internal/linecmd", "test/internal/linecmd/driver", "ucx/benchkit", "velo/auth/authtest", "velo/discovery/etcd/etcdtest", "velo/rendezvous/rdma/rdmatest", "verbs/verbstest"},
			"real components for tests and benchmarks (credentials, etcd servers, a TCP-backed RMA, sysfs trees, the suites' own programs built against either UCX, the command loop of the programs they drive and its client); no library package imports them"},
		{6, Library, "API", []string{"velo"},
			"the instance: options, peers, health, metrics wiring, the public errors"},
		{5, Library, "writes", []string{"velo/push"},
			"one-sided writes into granted regions: grants, writers, receivers"},
		{4, Library, "memory", []string{"velo/rendezvous/rdma"},
			"pinned arenas, the registered-bytes budget, one registration per lease"},
		{3, Library, "services", []string{"velo/rendezvous"},
			"staging, leases and the choice between RDMA, chunks and inline payloads"},
		{3, Library, "UCX transport", []string{"velo/transport/ucxtransport"},
			"frames and one-sided reads and writes over the binding"},
		{3, Library, "mlx5", []string{"mlx5dv"},
			"mlx5 direct verbs: is-mlx5, the DEVX probe, caps"},
		{2, Library, "messaging", []string{"velo/messenger"},
			"active messages: one-way, request and response, handlers"},
		{2, Library, "transports", []string{"velo/transport/rails", "velo/transport/shm", "velo/transport/tcp"},
			"TCP frames with the handshake; rails over several transports; the same-host lane of one-sided reads and writes"},
		{2, Library, "discovery backend", []string{"velo/discovery/etcd"},
			"membership in etcd"},
		{2, Library, "binding", []string{"ucx"},
			"UCP calls, the engine's progressor, sealed keys, the guarded GET and PUT"},
		{2, Library, "devices", []string{"rdmacm", "verbs/ibv", "verbs/topo"},
			"libibverbs wrappers, PCI topology, IP address to RDMA device"},
		{1, Library, "formats", []string{"velo/internal/errfam", "velo/internal/fanout", "velo/internal/slowpath", "velo/internal/wire", "velo/metrics"},
			"the control plane's byte layouts (a fuzz target each), error families, fan-out, the series, the once-per-peer slow-path line"},
		{1, Library, "seams", []string{"velo/auth", "velo/discovery", "velo/transport"},
			"Transport, RMA and Registration; credentials; the filesystem membership backend and its types"},
		{1, Library, "C", []string{"ucx/internal/capi"},
			"the only C of module ucx"},
		{1, Library, "probes", []string{"lanes", "verbs"},
			"sysfs probing of RDMA devices and memlock; a command's socket bytes per lane"},
	},
}

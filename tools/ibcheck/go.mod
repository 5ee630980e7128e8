module github.com/velo-go/velo/tools/ibcheck

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/velo-go/velo/lanes v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/mlx5dv v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/rdmacm v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/ucx v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/velo v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/verbs v0.0.0-00010101000000-000000000000
)

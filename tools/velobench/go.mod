module github.com/velo-go/velo/tools/velobench

go 1.26.0

require (
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/stretchr/testify v1.12.1
	github.com/velo-go/velo/ucx v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/velo v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/velo/discovery/etcd v0.0.0-00010101000000-000000000000
	github.com/velo-go/velo/verbs v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.50.0
)

module github.com/velo-go/velo/lanes

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
)

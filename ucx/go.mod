module github.com/velo-go/velo/ucx

go 1.26.0

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

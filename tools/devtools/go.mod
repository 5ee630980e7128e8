module github.com/velo-go/velo/tools/devtools

go 1.26.0

tool (
	golang.org/x/exp/cmd/apidiff
	honnef.co/go/tools/cmd/staticcheck
)

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/exp v0.0.0-20261120182113-8801fbdfac81
	golang.org/x/mod v0.43.0
	golang.org/x/tools v0.53.0
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/sync v0.25.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)

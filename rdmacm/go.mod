module github.com/velo-go/velo/rdmacm

go 1.26

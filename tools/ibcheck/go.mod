module github.com/velo-go/velo/tools/ibcheck

go 1.26

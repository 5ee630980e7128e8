module github.com/velo-go/velo/verbs

go 1.26

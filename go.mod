// The repository root is a module of its own, with no packages. Its only job: with a go.mod here,
// the go command runs in module mode at the root (not GOPATH mode), so `go doc
// github.com/velo-go/velo/velo` and friends resolve the workspace's packages from the top of the
// checkout, where a new user types them. Every real module lives in a folder of its own (go.work).
module github.com/velo-go/velo

go 1.26.0

// Not a module to use: this go.mod only keeps the fixture trees below out of the verbs module's
// zip. They copy sysfs, whose PCI folder names hold ':' and whose links are symlinks, and the go
// command refuses a module zip with such a file name (and drops symlinks), so without it verbs
// could not be published at all. The trees stay whole in a checkout, where the tests and
// ibcheck --sysfs read them. Never released, never in go.work.
module github.com/velo-go/velo/verbs/testdata

go 1.26.0

// Not a module to use: this go.mod only keeps the GPU node trees below out of the ibcheck
// module's zip. They copy sysfs, whose PCI folder names hold ':' (and whose links are symlinks),
// and the go command refuses a module zip with such a file name, so without it ibcheck could not
// be published. The trees stay whole in a checkout, where the tests read them. Never released,
// never in go.work (verbs/testdata/go.mod does the same for verbs' trees).
module github.com/velo-go/velo/tools/ibcheck/testdata/sysfs

go 1.26.0

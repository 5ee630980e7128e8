//go:build !(cgo && linux && ucx_static)

package ucxstatic

// Version returns "" without the static UCX.
func Version() string { return "" }

// Components returns ErrNotCompiled without the static UCX.
func Components() ([]string, error) { return nil, ErrNotCompiled }

// TransportResources returns ErrNotCompiled without the static UCX.
func TransportResources(string) ([]string, error) { return nil, ErrNotCompiled }

// InitTCP returns ErrNotCompiled without the static UCX.
func InitTCP() (InitReport, error) { return InitReport{}, ErrNotCompiled }

// IBMDOpsOrder returns ErrNotCompiled without the static UCX.
func IBMDOpsOrder() ([]MDOps, error) { return nil, ErrNotCompiled }

// GuardVersion returns "" without the static UCX.
func GuardVersion() string { return "" }

// GuardCounters returns zeros without the static UCX.
func GuardCounters() GuardCounts { return GuardCounts{} }

// SoftwareRMAProbe returns ErrNotCompiled without the static UCX.
func SoftwareRMAProbe(int) (RMAProbeReport, error) { return RMAProbeReport{}, ErrNotCompiled }

// TCPPutProbe returns ErrNotCompiled without the static UCX.
func TCPPutProbe() (TCPProbeReport, error) { return TCPProbeReport{}, ErrNotCompiled }

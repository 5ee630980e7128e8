package rdmacm

import "net"

// netInterfaceIndex returns the index of the interface an IPv6 zone names.
func netInterfaceIndex(zone string) (int, error) {
	ifc, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return ifc.Index, nil
}

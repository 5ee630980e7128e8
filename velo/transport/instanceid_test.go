package transport

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// An InstanceID prints as the 16 hex digits logs, errors and PeerInfo's JSON use, whatever verb
// asks for its text; %d still gives the number.
func TestInstanceIDPrintsAsSixteenHexDigits(t *testing.T) {
	id := InstanceID(0x00ab_cdef_0123_4567)
	assert.Equal(t, "00abcdef01234567", id.String())
	assert.Equal(t, "00abcdef01234567", fmt.Sprint(id))
	assert.Equal(t, "peer 00abcdef01234567", fmt.Sprintf("peer %v", id))
	assert.Equal(t, "peer 00abcdef01234567", fmt.Sprintf("peer %s", id))
	assert.Equal(t, fmt.Sprintf("%016x", uint64(id)), id.String(), "the form of the logs")
	assert.Equal(t, "48358647417488743", fmt.Sprintf("%d", id))
	assert.Equal(t, "ffffffffffffffff", InstanceID(^uint64(0)).String())
	assert.Equal(t, "0000000000000001", InstanceID(1).String())
}

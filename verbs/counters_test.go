package verbs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadPortCountersFixture(t *testing.T) {
	p := Paths{Sysfs: "testdata/sysfs/cx7-ib-active"}
	c, err := ReadPortCounters(p, "mlx5_0", 1)
	require.NoError(t, err)
	assert.Equal(t, "mlx5_0:1", c.Port)
	assert.Equal(t, uint64(4<<30), c.XmitBytes, "port_xmit_data counts 4-byte words")
	assert.Equal(t, uint64(1<<30), c.RcvBytes)
	assert.Equal(t, uint64(1048580), c.XmitPackets)
	assert.Equal(t, uint64(262150), c.RcvPackets)
	assert.Equal(t, map[string]uint64{"rx_read_requests": 4096, "rx_write_requests": 12, "out_of_sequence": 0}, c.HW)
	assert.Equal(t, []string{"out_of_sequence", "rx_read_requests", "rx_write_requests"}, c.HWNames())

	later := c
	later.XmitBytes += 1000
	later.HW = map[string]uint64{"rx_read_requests": 4100, "rx_write_requests": 12, "out_of_sequence": 0}
	d := later.Sub(c)
	assert.Equal(t, uint64(1000), d.XmitBytes)
	assert.Equal(t, uint64(4), d.HW["rx_read_requests"])
	assert.Zero(t, c.Sub(later).XmitBytes, "a counter that went backwards reads as 0")

	_, err = ReadPortCounters(p, "mlx5_9", 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mlx5_9:1")

	all, err := ReadAllPortCounters(p)
	require.NoError(t, err)
	require.Len(t, all, 1)
	_, err = ReadAllPortCounters(Paths{Sysfs: "testdata/sysfs/no-devices"})
	assert.ErrorIs(t, err, ErrNoDevice, "no devices is the probes' usual error, with its fix")

	// A port without counter files (another fixture) reads as zeros, not an error.
	c2, err := ReadPortCounters(Paths{Sysfs: "testdata/sysfs/cx7-roce-active"}, "mlx5_0", 1)
	require.NoError(t, err)
	assert.Zero(t, c2.XmitBytes)
	assert.Nil(t, c2.HW)
}

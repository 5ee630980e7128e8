package velo

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/rendezvous/rdma"
)

// RDMAConfig mirrors the registry's configuration field by field (its Pool is RDMAPoolConfig, so
// the two are not one type and RDMAConfig.registry copies each field): a field the registry gains
// fails here until RDMAConfig has it and registry copies it.
func TestRegistryConfigCopiesEveryField(t *testing.T) {
	mine, theirs := reflect.TypeFor[RDMAConfig](), reflect.TypeFor[rdma.Config]()
	require.Equal(t, theirs.NumField(), mine.NumField(), "RDMAConfig and rdma.Config have different fields")
	for i := range theirs.NumField() {
		assert.Equal(t, theirs.Field(i).Name, mine.Field(i).Name)
	}
	// Pool converts as a whole, so only the top level is copied by hand: every field must survive.
	c := RDMAConfig{Disabled: true, ForceCloseAfter: time.Minute,
		Pool: RDMAPoolConfig{ArenaSize: 1 << 20, RegisteredBytesBudget: 1 << 30, ArenaReclaimAfter: time.Second}}
	assert.Equal(t, rdma.Config{Disabled: true, ForceCloseAfter: time.Minute,
		Pool: rdma.PoolConfig{ArenaSize: 1 << 20, RegisteredBytesBudget: 1 << 30, ArenaReclaimAfter: time.Second}}, c.registry())
}

package errfam

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestASentinelMatchesItselfAndEveryParent(t *testing.T) {
	root, other := errors.New("closed"), errors.New("other root")
	child := New("registry closed", root, errors.ErrUnsupported)
	grandchild := New("arena closed", child)

	wrapped := fmt.Errorf("rdma: freeing slot 3: %w", grandchild)
	require.ErrorIs(t, wrapped, grandchild)
	require.ErrorIs(t, wrapped, child)
	require.ErrorIs(t, wrapped, root)
	require.ErrorIs(t, wrapped, errors.ErrUnsupported)
	require.NotErrorIs(t, wrapped, other)
	require.NotErrorIs(t, root, child, "a parent does not match its child")
	require.NotErrorIs(t, New("same text", root), New("same text", root), "each sentinel is its own value")
	require.Equal(t, "rdma: freeing slot 3: arena closed", wrapped.Error())
}

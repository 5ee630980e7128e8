package rendezvous

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIDTableAgainstAMap: random puts and deletes, in runs as the store makes them and scattered,
// leave the table holding what a map holds; each visits every entry once and survives deletes
// of entries it has not reached; an emptied page goes.
func TestIDTableAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab idTable[int]
	want := map[uint64]*int{}
	next := uint64(0)
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 4: // a new ID from the counter
			next++
			v := int(next)
			tab.put(next, &v)
			want[next] = &v
		case op < 5: // overwrite a live one
			for id := range want {
				v := -int(id)
				tab.put(id, &v)
				want[id] = &v
				break
			}
		case op < 8: // delete a recent or a random ID, live or not
			id := next - uint64(rng.IntN(100))
			if rng.IntN(2) == 0 {
				id = uint64(rng.IntN(int(next) + 2))
			}
			tab.del(id)
			delete(want, id)
		default:
			id := uint64(rng.IntN(int(next) + 2))
			require.Equal(t, want[id], tab.get(id), "step %d: id %d", step, id)
		}
		require.Equal(t, len(want), tab.len(), "step %d", step)
	}
	for id, v := range want {
		assert.Same(t, v, tab.get(id), "id %d", id)
	}
	seen := map[*int]int{}
	tab.each(func(v *int) { seen[v]++ })
	assert.Len(t, seen, len(want))
	for _, n := range seen {
		assert.Equal(t, 1, n)
	}

	// Deleting while visiting: each entry deletes itself and the entry after it.
	visited := 0
	tab.each(func(v *int) {
		visited++
		for id, w := range want {
			if w == v {
				tab.del(id)
				tab.del(id + 1)
			}
		}
	})
	assert.Equal(t, 0, tab.len())
	assert.LessOrEqual(t, visited, len(want))
	assert.Empty(t, tab.pages, "emptied pages are dropped")
	assert.Nil(t, tab.get(next))
}
